"""Schedule entries (docs/limits-and-time.md). Pure.

A limit's schedule is a list of entries, each a cron with parameters; while an entry's cron
matches the current minute (in its time zone) its parameters apply, first match wins, otherwise
the base ones. `scale` multiplies capacity and refill together; absolute fields replace them. A
quota may be scaled but never given a refill. Entries are kept as a compact JSON string on the
stamp.
"""

from __future__ import annotations

import json
from fractions import Fraction
from functools import lru_cache
from typing import Any

from . import cron

MILLI = 1000
MINUTE_MS = 60_000
#: How far ahead a wait looks for entry changes (a week of minutes); beyond, the rate in force
#: is assumed to last.
MAX_SCAN_MINUTES = 7 * 24 * 60
Triple = tuple[int, int, int]  # capacity (milli), refill (milli), period (ms)


def encode(entries: list[dict[str, Any]]) -> str:
    return json.dumps(entries, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=256)
def decode(schedule: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(schedule)) if schedule else ()


def active(schedule: str, now: int) -> int:
    """Index of the entry in force at `now`, or -1 for the base parameters."""
    for index, entry in enumerate(decode(schedule)):
        if cron.parse(entry["cron"], entry.get("tz", "UTC")).matches_minute(now):
            return index
    return -1


@lru_cache(maxsize=1024)
def next_change(schedule: str, entry: int, after_minute: int, minutes: int) -> int | None:
    """The first minute start after minute `after_minute` (epoch ms // MINUTE_MS), at most
    `minutes` later, at which the entry in force is no longer `entry`; None if none is.

    Jumps from one entry's edge to the next (an entry starts matching at its next cron edge and
    stops at its first minute that does not match), so a week ahead costs a few edges, not a
    scan of every minute."""
    entries = [cron.parse(entry["cron"], entry.get("tz", "UTC")) for entry in decode(schedule)]
    at = after_minute * MINUTE_MS
    limit = (after_minute + min(minutes, MAX_SCAN_MINUTES)) * MINUTE_MS
    while at < limit:
        turns = [
            entry.next_mismatch_ms(at, limit)
            if entry.matches_minute(at)
            else entry.next_edge_ms(at)
            for entry in entries
        ]
        upcoming = [turn for turn in turns if turn is not None and turn <= limit]
        if not upcoming:
            return None
        at = min(upcoming)
        if active(schedule, at) != entry:
            return at
    return None


def effective(base: Triple, schedule: str, index: int, *, quota: bool) -> Triple:
    """The parameters in force in entry `index` (-1: the base ones)."""
    if index < 0:
        return base
    entry = decode(schedule)[index]
    capacity, refill, period = base
    if entry.get("scale") is not None:
        scale = Fraction(str(entry["scale"]))
        capacity = max(1, int(capacity * scale))
        refill = 0 if quota else max(1, int(refill * scale))
        return capacity, refill, period
    if entry.get("capacity") is not None:
        capacity = int(entry["capacity"]) * MILLI
    if not quota:
        if entry.get("refill_amount") is not None:
            refill = int(entry["refill_amount"]) * MILLI
        if entry.get("refill_period_seconds") is not None:
            period = int(entry["refill_period_seconds"]) * 1000
    return capacity, refill, period
