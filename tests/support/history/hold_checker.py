"""Checks a concurrency-hold history (hold_worker's logs): never more held than the cap.

Each admitted lease was *certainly* holding its unit from when its acquire returned until:
- its exit was invoked, when it exited with its hold (`hold_lost` False then): the give-back
  lands after that;
- its entry's last logged expiry (real time), when its hold was lost, or its process was killed
  with the lease open: no other writer frees an entry before its holder counts it lost; for a
  lost hold, no later than the first write of its own process (planned) that shows the entry
  gone (a holder removes its own entries once its leases count them lost, which can be before
  an expiry a renewal confirmed late set: simulation seed `plans.drawn(51)`).
Counting these intervals undercounts what was held at any instant (holds start before the
acquire returns and end after the exit is invoked), so a count above the cap is a certain
violation. Ends sort before starts at the same instant.

Recovery (`Recovery`): a killed process's entry must be freed by "lease_ttl + one write": a
process that saw it unchanged for a lease_ttl removes it in its next write. So for each entry
left by a killed process, the bound is the first write, by any other process, planned more
than a lease_ttl after that process first saw the entry as last written (sightings from
`SETTLE_S` after its last write on: a write landing late may show it as it was before), and
every logged write from the bound on must show it gone.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETTLE_S = 1.0  # beyond the proxy's read timeout (0.5 s): the entry's last write has landed


@dataclass(frozen=True)
class Write:
    process: str
    planned: float  # real time, seconds
    received: float
    keys: frozenset[str]  # the entries the write's image shows


@dataclass(frozen=True)
class Recovery:
    """An entry a killed process left holding: when it lapsed, when a write first showed it
    gone, and the latest that may be (None: no process wrote late enough to tell)."""

    key: str
    expiry: float
    freed: float | None
    bound: float | None

    @property
    def late(self) -> bool:
        return self.bound is not None and (self.freed is None or self.freed > self.bound)


@dataclass
class HoldHistory:
    intervals: list[tuple[float, float]] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    max_held: int = 0
    over: list[float] = field(default_factory=list)  # instants a count exceeded the cap
    recoveries: list[Recovery] = field(default_factory=list)
    partitions: int = 0


def recovery(key: str, expiry: float, owner: str, writes: list[Write], ttl: float) -> Recovery:
    """When the entry `key` (last written a lease_ttl before `expiry`) was freed, and its bound."""
    written = expiry - ttl
    others = [w for w in writes if w.process != owner and w.planned >= written]
    present = [w.planned for w in others if key in w.keys]
    after = max(present, default=written)
    freed = min(
        (w.planned for w in others if key not in w.keys and w.planned >= after), default=None
    )
    bounds = []
    for process in {w.process for w in others}:
        mine = [w for w in others if w.process == process]
        seen = [w.received for w in mine if key in w.keys and w.received >= written + SETTLE_S]
        if seen:
            later = [w.planned for w in mine if w.planned > min(seen) + ttl]
            bounds += later[:1]
    return Recovery(key, expiry, freed, min(bounds, default=None))


def check_holds(logs: list[Path], cap: int, ttl: float) -> HoldHistory:
    """The verdicts on the hold workers' logs (a process killed before it logged anything did
    nothing)."""
    return check_hold_lines(
        {
            path.stem: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for path in logs
            if path.exists()
        },
        cap,
        ttl,
    )


def check_hold_lines(logs: dict[str, list[dict[str, Any]]], cap: int, ttl: float) -> HoldHistory:
    """The verdicts on the log lines of each process (by name)."""
    out = HoldHistory()
    writes: list[Write] = []
    dead: list[tuple[str, float, str]] = []  # (entry, expiry, process)
    for process, lines in logs.items():
        expiries: dict[str, float] = {}
        open_: dict[str, tuple[float, str]] = {}  # op -> (start, entry)
        gone: dict[str, float] = {}  # op -> its own first write showing its entry gone
        for line in lines:
            event = line["e"]
            if event == "entry":
                expiries[line["key"]] = line["expiry"]
            elif event == "wrote":
                writes.append(Write(process, line["t"], line["rt"], frozenset(line["keys"])))
                for op, (start, key) in open_.items():
                    if key not in line["keys"] and op not in gone:
                        gone[op] = max(start, line["t"])
            elif event == "partition":
                out.partitions += 1
            elif event == "stats":
                out.faults.update(line["faults"])
            elif event == "held":
                out.outcomes["held"] += 1
                open_[line["op"]] = (line["t"], line["key"])
            elif event == "leave":
                start, key = open_.pop(line["op"])
                end = line["t"]
                if line["lost"]:
                    end = min(expiries.get(key, start), gone.get(line["op"], float("inf")))
                out.outcomes["lost" if line["lost"] else "given back"] += 1
                out.intervals.append((start, max(start, end)))
            else:
                out.outcomes[event] += 1
        for start, key in open_.values():  # killed with the lease open: until its entry lapsed
            out.outcomes["open at kill"] += 1
            out.intervals.append((start, max(start, expiries.get(key, start))))
        dead += [(k, expiries[k], process) for k in {k for _, k in open_.values()} if k in expiries]
    writes.sort(key=lambda w: w.planned)
    out.recoveries = [recovery(key, expiry, owner, writes, ttl) for key, expiry, owner in dead]
    events = sorted([(s, 1) for s, _ in out.intervals] + [(e, -1) for _, e in out.intervals])
    held = 0
    for moment, step in events:
        held += step
        out.max_held = max(out.max_held, held)
        if held > cap:
            out.over.append(moment)
    return out
