"""The day-scanning edge search this project had before core/cron.py moved onto cronsim.

Kept as a test oracle only: the property tests compare the two on the cases where both follow
our rules (fixed-hour schedules; hour-wildcard schedules away from an autumn repeat, where the
old search fired only the first of the two real hours). It walks local days and builds every
edge of a matching day; the field sets come from our own parser.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from zae_limiter.core.cron import Cron

_SCAN_DAYS = 366 * 8


def _local_edges(schedule: Cron, day: date) -> list[int]:
    edges = []
    for hour in sorted(schedule.hours):
        for minute in sorted(schedule.minutes):
            local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=schedule.zone)
            as_utc = local.astimezone(UTC)
            if as_utc.astimezone(schedule.zone).replace(tzinfo=None) != local.replace(tzinfo=None):
                continue  # does not exist locally (DST gap)
            edges.append(int(as_utc.timestamp() * 1000))  # fold=0: the first occurrence
    return edges


def next_edge_ms(schedule: Cron, after_ms: int) -> int | None:
    start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(schedule.zone).date()
    for offset in range(_SCAN_DAYS):
        day = start + timedelta(days=offset)
        if schedule.day_matches(day):
            for ms in _local_edges(schedule, day):
                if ms > after_ms:
                    return ms
    return None


def last_edge_ms(schedule: Cron, at_ms: int) -> int | None:
    start = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(schedule.zone).date()
    for offset in range(_SCAN_DAYS):
        day = start - timedelta(days=offset)
        if schedule.day_matches(day):
            for ms in reversed(_local_edges(schedule, day)):
                if ms <= at_ms:
                    return ms
    return None
