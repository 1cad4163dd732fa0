"""Standard 5-field cron edges in an IANA time zone (docs/quotas.md). Pure but for reading zones.

A thin wrapper over `cronsim` that enforces our documented rules:

* minute hour day-of-month month day-of-week; names (MON, JAN) accepted; Sunday is 0 or 7;
  `L`, `W`, `#`, `?` and 6-field forms are rejected; when both day fields are restricted (not
  `*`) they are ORed, otherwise ANDed;
* DST as ISC cron does it: a schedule with a fixed hour skips a local time that does not exist
  and fires a repeated local time once (its first occurrence); a schedule whose hour field is
  `*` or `*/n` fires at every real hour (both 02:30s of an autumn repeat, no two-hour gap).

cronsim walks the calendar field by field (15-40 µs per edge, any shape); the wrapper validates
with our own field parser, hands cronsim an expression in which the day fields' OR/AND and the
hour field's wildcard mean exactly what our rules say, drops the times cronsim moves out of a
DST gap, and remembers the last bracket of edges it found, so repeated look-ups inside one
period cost nothing.
"""

from __future__ import annotations

import copy
import importlib.resources
import os
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

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
#: A gap-shifted time is dropped and the walk goes on; a schedule cannot hit a gap this often.
_MAX_DROPPED = 8


class CronError(ValueError):
    """A cron expression or time zone that cannot be used."""


@dataclass
class _Bracket:
    """The last pair of consecutive edges found, (previous, next) epoch ms, set in one step."""

    pair: tuple[int, int | None] | None = None

    def around(self, at_ms: int) -> tuple[int, int | None] | None:
        pair = self.pair
        if pair is None or at_ms < pair[0] or (pair[1] is not None and at_ms >= pair[1]):
            return None
        return pair


@dataclass
class _Engine:
    """The cronsim iterator parsed once (None: build one per look-up)."""

    template: CronSim | None


@dataclass(frozen=True)
class Cron:
    """A parsed schedule. Equal schedules compare equal however they were spelled."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_restricted: bool
    weekdays_restricted: bool
    zone: ZoneInfo = field(compare=False)  # compared by its rules, below
    zone_rules: bytes = field(default=b"", repr=False)
    hour_wildcard: bool = False  # `*` or `*/n`: fires at every real hour across DST
    engine_expr: str = field(default="", compare=False)  # what cronsim is given
    _bracket: _Bracket = field(default_factory=_Bracket, compare=False, repr=False)
    _engine: _Engine = field(default_factory=lambda: _Engine(None), compare=False, repr=False)

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        weekday = (day.weekday() + 1) % 7
        in_days = day.day in self.days
        in_weekdays = weekday in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_days or in_weekdays
        return in_days and in_weekdays

    def _is_real_edge(self, moment: datetime) -> bool:
        """False for a time cronsim moved out of a DST gap (its local wall time is not ours),
        or one that does not exist locally."""
        if moment.minute not in self.minutes or moment.hour not in self.hours:
            return False
        wall = moment.replace(tzinfo=None)
        return _local(_ms(moment), self.zone).replace(tzinfo=None) == wall

    def _engine_at(self, start: datetime, reverse: bool) -> CronSim:
        """A cronsim iterator from `start`: a copy of the parsed template with its position set
        (what CronSim's constructor does after parsing), so no look-up parses the expression."""
        template = self._engine.template
        if template is None:
            return CronSim(self.engine_expr, start, reverse=reverse)
        it = copy.copy(template)
        it.skip_initial_tick = bool(reverse and start.microsecond)
        it.tick_direction = -1 if reverse else 1
        position = start.replace(microsecond=0)
        it.dt = position.replace(tzinfo=None) if it.fixup_tz else position
        return it

    def _walk(self, start: datetime, reverse: bool) -> int | None:
        try:
            it = self._engine_at(start, reverse)
            for _ in range(_MAX_DROPPED):
                moment = next(it)
                if self._is_real_edge(moment):
                    return _ms(moment)
        except (StopIteration, CronSimError):
            return None
        return None

    def next_edge_ms(self, after_ms: int) -> int | None:
        """First edge strictly after `after_ms` (epoch ms), or None."""
        known = self._bracket.around(after_ms)
        if known is not None:
            return known[1]
        return self._walk(_local(after_ms, self.zone), reverse=False)

    def last_edge_ms(self, at_ms: int) -> int | None:
        """Latest edge at or before `at_ms`, or None."""
        known = self._bracket.around(at_ms)
        if known is not None:
            return known[0]
        # cronsim steps one second back before it looks: start just after `at_ms`'s second
        last = self._walk(_local((at_ms // 1000 + 1) * 1000, self.zone), reverse=True)
        if last is not None:
            following = self._walk(_local(at_ms, self.zone), reverse=False)
            self._bracket.pair = (last, following)
        return last

    def matches_minute(self, at_ms: int) -> bool:
        """Whether the local minute containing `at_ms` matches (level-triggered, not an edge)."""
        local = _local(at_ms, self.zone)
        return (
            local.minute in self.minutes
            and local.hour in self.hours
            and self.day_matches(local.date())
        )

    def next_mismatch_ms(self, at_ms: int, limit_ms: int) -> int | None:
        """The first minute start after `at_ms` (a matching minute) that does not match, at most
        `limit_ms`; None if every minute up to it matches. Walks whole local hours when every
        minute of an hour matches."""
        minute = at_ms - at_ms % 60_000
        every_minute = len(self.minutes) == 60
        while minute < limit_ms:
            local = _local(minute, self.zone)
            step = 60 - local.minute if every_minute else 1
            minute += step * 60_000
            if minute <= limit_ms and not self.matches_minute(minute):
                return minute
        return None


def _local(ms: int, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(zone)


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


def _listed(values: frozenset[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


def zone(tz: str) -> ZoneInfo:
    """The IANA zone `tz`, or CronError saying what to write."""
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise CronError(f"unknown time zone {tz!r}; use an IANA name like 'Europe/Paris'") from exc


@lru_cache(maxsize=512)
def rules(tz: str) -> bytes:
    """The compiled rules (TZif data) of a valid zone name, read where `ZoneInfo` reads them
    (`zoneinfo.TZPATH`, then the `tzdata` package): two names of one zone (`Etc/UTC` and `UTC`,
    `US/Eastern` and `America/New_York`) have the same rules and are one schedule's zone."""
    for root in zoneinfo.TZPATH:
        path = os.path.join(root, tz)
        if os.path.isfile(path):
            with open(path, "rb") as file:
                return file.read()
    package, _, name = f"tzdata.zoneinfo.{tz.replace('/', '.')}".rpartition(".")
    try:
        return importlib.resources.files(package).joinpath(name).read_bytes()
    except (ModuleNotFoundError, OSError):
        return tz.encode()  # not found where ZoneInfo looks: compared by its name


@lru_cache(maxsize=512)
def parse(expression: str, tz: str = "UTC") -> Cron:
    """Parse a 5-field cron expression evaluated in the IANA zone `tz`."""
    zone_info = zone(tz)
    fields = expression.split()
    if len(fields) != 5:
        raise CronError(
            f"cron {expression!r} has {len(fields)} fields; use 5: minute hour day month weekday"
        )
    minutes, hours, days, months, weekday_values = (
        frozenset(_parse_field(text, low, high, names, label))
        for text, (label, low, high, names) in zip(fields, _FIELDS, strict=True)
    )
    weekdays = frozenset(0 if d == 7 else d for d in weekday_values)
    days_restricted, weekdays_restricted = fields[2] != "*", fields[4] != "*"
    hour_wildcard = fields[1].startswith("*")
    # cronsim: the minute never starts with "*" (so a fixed hour gets ISC cron's DST handling),
    # the hour keeps its wildcard, a restricted day field never starts with "*" (OR/AND as ours)
    engine = " ".join(
        [
            _listed(minutes),
            fields[1] if hour_wildcard else _listed(hours),
            _listed(days) if days_restricted else "*",
            _listed(months),
            _listed(weekdays) if weekdays_restricted else "*",
        ]
    )
    try:
        template = CronSim(engine, datetime(2026, 1, 1, tzinfo=zone_info))
    except CronSimError as exc:
        raise CronError(f"cron {expression!r} never fires: {exc}") from exc
    known = all(hasattr(template, a) for a in ("dt", "tick_direction", "skip_initial_tick"))
    return Cron(
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=weekdays,
        days_restricted=days_restricted,
        weekdays_restricted=weekdays_restricted,
        zone=zone_info,
        zone_rules=rules(tz),
        hour_wildcard=hour_wildcard,
        engine_expr=engine,
        _engine=_Engine(template if known and hasattr(template, "fixup_tz") else None),
    )


def same_schedule(a: str, b: str) -> bool:
    """Whether two stamped reset schedules (`expr|tz`, several joined by `;`) are the same
    schedule however spelled (`0 0 * * 1` and `0 0 * * MON`)."""
    if a == b:
        return True

    def parsed(text: str) -> list[Cron]:
        return [parse(*edge.split("|", 1)) for edge in text.split(";")] if text else []

    try:
        return parsed(a) == parsed(b)
    except CronError:
        return False
