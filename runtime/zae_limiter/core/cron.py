"""Standard 5-field cron edges in an IANA time zone (reference.md §4.3). Pure, no I/O.

Rules: minute hour day-of-month month day-of-week; names (MON, JAN) accepted; Sunday is 0 or 7;
`L`, `W`, `#` and 6-field forms are rejected; when both day fields are restricted they are ORed.
A local time that does not exist (DST gap) is skipped; one that occurs twice fires once (the
first occurrence).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_SCAN_DAYS = 366 * 8  # far enough for "29 Feb on a Monday"


class CronError(ValueError):
    """A cron expression or time zone that cannot be used."""


@dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool
    zone: ZoneInfo

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        weekday = (day.weekday() + 1) % 7
        in_days = day.day in self.days
        in_weekdays = weekday in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def _local_edges(self, day: date) -> list[datetime]:
        """Edges on one local day, as aware UTC datetimes, ascending."""
        edges = []
        for hour in sorted(self.hours):
            for minute in sorted(self.minutes):
                local = datetime(day.year, day.month, day.day, hour, minute, tzinfo=self.zone)
                as_utc = local.astimezone(UTC)
                if as_utc.astimezone(self.zone).replace(tzinfo=None) != local.replace(tzinfo=None):
                    continue  # does not exist locally (DST gap)
                edges.append(as_utc)  # fold=0: an ambiguous time fires at its first occurrence
        return edges

    def next_edge_ms(self, after_ms: int) -> int | None:
        """First edge strictly after `after_ms` (epoch ms), or None."""
        start = datetime.fromtimestamp(after_ms / 1000, UTC).astimezone(self.zone).date()
        for offset in range(_SCAN_DAYS):
            day = start + timedelta(days=offset)
            if not self.day_matches(day):
                continue
            for edge in self._local_edges(day):
                ms = _ms(edge)
                if ms > after_ms:
                    return ms
        return None

    def last_edge_ms(self, at_ms: int) -> int | None:
        """Latest edge at or before `at_ms`, or None."""
        start = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.zone).date()
        for offset in range(_SCAN_DAYS):
            day = start - timedelta(days=offset)
            if not self.day_matches(day):
                continue
            for edge in reversed(self._local_edges(day)):
                ms = _ms(edge)
                if ms <= at_ms:
                    return ms
        return None

    def matches_minute(self, at_ms: int) -> bool:
        """Whether the local minute containing `at_ms` matches (level-triggered windows)."""
        local = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.zone)
        return (
            local.minute in self.minutes
            and local.hour in self.hours
            and self.day_matches(local.date())
        )


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _parse_value(text: str, names: dict[str, int], low: int, high: int, label: str) -> int:
    upper = text.upper()
    if upper in names:
        return names[upper]
    if not text.isdigit():
        raise CronError(f"{label} field has {text!r}; use numbers, ranges, lists or steps")
    value = int(text)
    if not low <= value <= high:
        raise CronError(f"{label} value {value} is outside {low}-{high}")
    return value


def _parse_field(text: str, low: int, high: int, names: dict[str, int], label: str) -> set[int]:
    values: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, step_text = part.split("/", 1)
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{label} field has a bad step {step_text!r}")
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            a, b = part.split("-", 1)
            first = _parse_value(a, names, low, high, label)
            last = _parse_value(b, names, low, high, label)
            if first > last:
                raise CronError(f"{label} range {part!r} runs backwards")
        else:
            first = _parse_value(part, names, low, high, label)
            last = high if step > 1 else first
        values.update(range(first, last + 1, step))
    return values


@lru_cache(maxsize=512)
def parse(expression: str, tz: str = "UTC") -> Cron:
    """Parse a 5-field cron expression evaluated in the IANA zone `tz`."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CronError(f"unknown time zone {tz!r}; use an IANA name like 'Europe/Paris'") from exc
    fields = expression.split()
    if len(fields) != 5:
        raise CronError(
            f"cron {expression!r} has {len(fields)} fields; use 5: minute hour day month weekday"
        )
    parsed = [
        _parse_field(text, low, high, names, label)
        for text, (label, low, high, names) in zip(fields, _FIELDS, strict=True)
    ]
    weekdays = {0 if d == 7 else d for d in parsed[4]}
    return Cron(
        minutes=frozenset(parsed[0]),
        hours=frozenset(parsed[1]),
        days=frozenset(parsed[2]),
        months=frozenset(parsed[3]),
        weekdays=frozenset(weekdays),
        days_restricted=fields[2] != "*",
        weekdays_restricted=fields[4] != "*",
        zone=zone,
    )
