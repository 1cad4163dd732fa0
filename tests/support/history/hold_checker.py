"""Checks a concurrency-hold history (hold_worker's logs): never more held than the cap.

Each admitted lease was *certainly* holding its unit from when its acquire returned until:
- its exit was invoked, when it exited with its hold (`hold_lost` False then): the give-back
  lands after that;
- its entry's last logged expiry (real time), when its hold was lost, or its process was killed
  with the lease open: no other writer frees an entry before its holder counts it lost.
Counting these intervals undercounts what was held at any instant (holds start before the
acquire returns and end after the exit is invoked), so a count above the cap is a certain
violation. Ends sort before starts at the same instant.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class HoldHistory:
    intervals: list[tuple[float, float]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    max_held: int = 0
    over: list[float] = field(default_factory=list)  # instants a count exceeded the cap


def check_holds(logs: list[Path], cap: int) -> HoldHistory:
    out = HoldHistory()
    for path in logs:
        if not path.exists():
            continue  # killed before it logged anything: it did nothing
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        expiries: dict[str, float] = {}
        open_: dict[str, tuple[float, str]] = {}  # op -> (start, entry)
        for line in lines:
            event = line["e"]
            if event == "entry":
                expiries[line["key"]] = line["expiry"]
            elif event == "stats":
                out.faults.update(line["faults"])
            elif event == "held":
                out.outcomes["held"] += 1
                open_[line["op"]] = (line["t"], line["key"])
            elif event == "leave":
                start, key = open_.pop(line["op"])
                end = expiries.get(key, start) if line["lost"] else line["t"]
                out.outcomes["lost" if line["lost"] else "given back"] += 1
                out.intervals.append((start, max(start, end)))
            else:
                out.outcomes[event] += 1
        for start, key in open_.values():  # killed with the lease open: until its entry lapsed
            out.outcomes["open at kill"] += 1
            out.intervals.append((start, max(start, expiries.get(key, start))))
    events = sorted([(s, 1) for s, _ in out.intervals] + [(e, -1) for _, e in out.intervals])
    held = 0
    for moment, step in events:
        held += step
        out.max_held = max(out.max_held, held)
        if held > cap:
            out.over.append(moment)
    return out
