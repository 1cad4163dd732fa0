"""The command line's limit syntax (docs/cli.md), parsed and printed. Pure, no I/O.

    NAME:RATE[/[N]UNIT][:BURST]     rpm:100, units:1000000/day, tok:500/10sec:2000
    NAME:AMOUNT@cron(EXPR[, TZ])    weekly:5000000@cron(0 0 * * 1),
                                    month:100@cron(0 0 1 * *, Europe/Paris)
    NAME:AMOUNT@after(DURATION)     session:1000000@after(5h)
    NAME:MAX@concurrent[(LEASE)]    parallel:4@concurrent, jobs:2@concurrent(5m)

Schedules: `NAME@cron(EXPR[, TZ]):scale=2` or `NAME@cron(...):capacity=200,refill_amount=200,
refill_period=60`. Amounts: `NAME:N`. Every error is a `SpecError` naming the bad part.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import timedelta
from zoneinfo import available_timezones

from ..concurrent_limits import (
    DEFAULT_LEASE_TTL_SECONDS,
    MAX_LEASE_TTL_SECONDS,
    MIN_LEASE_TTL_SECONDS,
)
from ..errors import ValidationError
from ..limits import MAX_PERIOD_SECONDS, Limit, ScheduleEntry

UNIT_SECONDS: dict[str, int] = {"sec": 1, "min": 60, "hour": 3600, "day": 86400}
_UNIT_ALIASES: dict[str, str] = {
    "s": "sec",
    "sec": "sec",
    "secs": "sec",
    "second": "sec",
    "seconds": "sec",
    "m": "min",
    "min": "min",
    "mins": "min",
    "minute": "min",
    "minutes": "min",
    "h": "hour",
    "hr": "hour",
    "hour": "hour",
    "hours": "hour",
    "d": "day",
    "day": "day",
    "days": "day",
}
_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}

_NUMBER = r"\d[\d_]*"
_RATE = re.compile(
    rf"^(?P<rate>{_NUMBER})(?:/(?P<n>{_NUMBER})?(?P<unit>[A-Za-z]+))?"
    rf"(?::(?P<burst>{_NUMBER}))?$"
)
#: A number that is not a whole amount (`-5`, `1.5`, `1e3`) where the rate should be.
_LEADING_NUMBER = re.compile(r"^(?=[+-]?\.?\d)[+-]?\d*(?:\.\d*)?(?:[eE][+-]?\d+)?(?=$|[/:])")
_QUOTA = re.compile(rf"^(?P<amount>{_NUMBER})@(?P<kind>cron|after)\((?P<arg>.*)\)$", re.S)
_CONCURRENT = re.compile(rf"^(?P<amount>{_NUMBER})@concurrent(?:\((?P<arg>[^)]*)\))?$")
_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_SCHEDULE = re.compile(r"^(?P<name>[^@:\s]+)@cron\((?P<arg>[^)]*)\)(?::(?P<params>.*))?$", re.S)


class SpecError(ValueError):
    """A limit, schedule, duration or amount written on the command line cannot be read."""


def _int(text: str, what: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"{what} in {spec!r} must be a whole number, not {text!r}") from None


def _name_and_rest(spec: str) -> tuple[str, str]:
    name, sep, rest = spec.strip().partition(":")
    if not sep or not name or not rest:
        raise SpecError(
            f"cannot read limit {spec!r}: write NAME:RATE[/UNIT][:BURST], "
            "NAME:AMOUNT@cron(EXPR[, TZ]), NAME:AMOUNT@after(DURATION) or "
            "NAME:MAX@concurrent[(LEASE)]"
        )
    return name.strip(), rest.strip()


def parse_duration(text: str) -> int:
    """Seconds from `90`, `90s`, `30m`, `5h`, `1d12h` (units d, h, m, s, largest first)."""
    value = text.strip().lower().replace(" ", "")
    if value.isdigit():
        return int(value)
    match = _DURATION.match(value)
    if not value or match is None or not any(match.groups()):
        raise SpecError(f"cannot read duration {text!r}: write e.g. 90s, 30m, 5h, 1d12h or seconds")
    pairs = zip(match.groups(), _DURATION_UNITS.values(), strict=True)
    return sum(int(g) * unit for g, unit in pairs if g)


def format_duration(seconds: int) -> str:
    """The shortest `1d12h`-style text for a number of seconds."""
    if seconds <= 0:
        return f"{seconds}s"
    parts = []
    for suffix, unit in _DURATION_UNITS.items():
        if seconds >= unit:
            count, seconds = divmod(seconds, unit)
            parts.append(f"{count}{suffix}")
    return "".join(parts)


def cron_and_zone(arg: str) -> tuple[str, str]:
    """(cron expression, time zone) from `EXPR[, TZ]`.

    Cron fields never contain a space after a comma, so the zone is what follows the last comma
    when a space follows it (`0 0 1 * *, Europe/Paris`), or when it names an IANA zone
    (`0 0 1 * *,Europe/Paris`); otherwise the comma belongs to the cron (`0 0 * * 1,5`).
    """
    text = arg.strip()
    head, sep, tail = text.rpartition(",")
    if sep and tail.strip() and (tail[:1].isspace() or tail.strip() in _zones()):
        return head.strip(), tail.strip()
    return text, "UTC"


_ZONES: set[str] = set()


def _zones() -> set[str]:
    if not _ZONES:
        _ZONES.update(available_timezones())
    return _ZONES


def parse_limit(spec: str, *, soft: bool = False) -> Limit:
    """One `-l/--limit` value as a `Limit`."""
    name, rest = _name_and_rest(spec)
    try:
        held = _CONCURRENT.match(rest)
        if held:
            return _concurrent(name, held["amount"], held["arg"], spec, soft)
        quota = _QUOTA.match(rest)
        if quota:
            amount = _int(quota["amount"], "the amount", spec)
            if quota["kind"] == "cron":
                expr, tz = cron_and_zone(quota["arg"])
                return Limit.quota(name, amount, cron=expr, tz=tz, soft=soft)
            seconds = parse_duration(quota["arg"])
            if not 1 <= seconds <= MAX_PERIOD_SECONDS:
                raise SpecError(
                    f"the session length in {spec!r} is {format_duration(seconds)}; "
                    "use 1s to 10**9 seconds, e.g. @after(5h)"
                )
            after = timedelta(seconds=seconds)
            return Limit.quota(name, amount, reset_after=after, soft=soft)
        rate = _RATE.match(rest)
        number = _LEADING_NUMBER.match(rest)
        if rate is None and number is not None:
            raise SpecError(
                f"the rate {number[0]!r} in {spec!r} must be a whole number of at least 1 "
                "(amounts are integers; use a longer period for less, e.g. 3/2min)"
            )
        if rate is None:
            raise SpecError(
                f"cannot read limit {spec!r}: after NAME: write RATE[/[N]UNIT][:BURST] "
                "(e.g. 100/min:200), AMOUNT@cron(EXPR[, TZ]), AMOUNT@after(DURATION) or "
                "MAX@concurrent[(LEASE)]"
            )
        period = 60
        if rate["unit"]:
            unit = _UNIT_ALIASES.get(rate["unit"].lower())
            if unit is None:
                raise SpecError(
                    f"unknown unit {rate['unit']!r} in {spec!r}: use sec, min, hour or day"
                )
            count = _int(rate["n"], "the period count", spec) if rate["n"] else 1
            period = count * UNIT_SECONDS[unit]
        refill = _int(rate["rate"], "the rate", spec)
        capacity = _int(rate["burst"], "the burst", spec) if rate["burst"] else refill
        return Limit(name, capacity, refill, period, soft=soft)
    except ValidationError as exc:
        raise SpecError(f"limit {spec!r}: {exc}") from None


def _concurrent(name: str, amount: str, lease_ttl: str | None, spec: str, soft: bool) -> Limit:
    """`NAME:MAX@concurrent[(LEASE)]`: at most MAX held at once; a hold not renewed for LEASE
    (default 60s) comes back."""
    seconds = DEFAULT_LEASE_TTL_SECONDS if lease_ttl is None else parse_duration(lease_ttl)
    if not MIN_LEASE_TTL_SECONDS <= seconds <= MAX_LEASE_TTL_SECONDS:
        raise SpecError(
            f"the lease in {spec!r} is {format_duration(seconds)}; use 1s to 1d, "
            "e.g. @concurrent(60s)"
        )
    return Limit.concurrent(name, _int(amount, "the maximum", spec), lease_ttl=seconds, soft=soft)


def _schedule_value(key: str, text: str, spec: str) -> float | int:
    if key == "scale":
        try:
            return float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise SpecError(f"scale in {spec!r} must be a number, not {text!r}") from None
    return _int(text, key, spec)


_SCHEDULE_KEYS = {
    "scale": "scale",
    "capacity": "capacity",
    "refill_amount": "refill_amount",
    "refill_period": "refill_period_seconds",
    "refill_period_seconds": "refill_period_seconds",
}


def parse_schedule(spec: str) -> tuple[str, ScheduleEntry]:
    """One `--schedule` value: (limit name, schedule entry)."""
    match = _SCHEDULE.match(spec.strip())
    if match is None or not match["params"]:
        raise SpecError(
            f"cannot read schedule {spec!r}: write NAME@cron(EXPR[, TZ]):scale=2 or "
            "NAME@cron(EXPR[, TZ]):capacity=200,refill_amount=200,refill_period=60"
        )
    expr, tz = cron_and_zone(match["arg"])
    fields: dict[str, float | int] = {}
    for pair in match["params"].split(","):
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or key not in _SCHEDULE_KEYS:
            raise SpecError(
                f"cannot read {pair.strip()!r} in schedule {spec!r}: use scale=N, or capacity=N, "
                "refill_amount=N, refill_period=SECONDS"
            )
        fields[_SCHEDULE_KEYS[key]] = _schedule_value(key, value.strip(), spec)
    try:
        return match["name"], ScheduleEntry(cron=expr, tz=tz, **fields)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise SpecError(f"schedule {spec!r}: {exc}") from None


def build_limits(
    limits: Iterable[Limit],
    soft: Sequence[str] = (),
    schedules: Sequence[str] = (),
    alerts: Sequence[str] = (),
) -> list[Limit]:
    """Apply `--soft NAME`, `--schedule` and `--alert` values to a list of limits (names must be
    listed)."""
    out = {limit.name: limit for limit in limits}
    for name in soft:  # first: a soft limit may alert above 100 %
        if name not in out:
            raise SpecError(f"--soft {name}: no limit named {name!r} is listed ({_names(out)})")
        out[name] = replace(out[name], soft=True)
    for spec in alerts:
        name, thresholds = parse_alert(spec)
        if name not in out:
            raise SpecError(f"--alert {spec}: no limit named {name!r} is listed ({_names(out)})")
        try:
            out[name] = replace(out[name], alert_at=thresholds)
        except ValidationError as exc:
            raise SpecError(f"--alert {spec}: {exc}") from None
    for spec in schedules:
        name, entry = parse_schedule(spec)
        if name not in out:
            raise SpecError(
                f"--schedule {spec!r}: no limit named {name!r} is listed ({_names(out)})"
            )
        try:
            out[name] = out[name].with_schedule((*out[name].schedule, entry))
        except ValidationError as exc:
            raise SpecError(f"--schedule {spec!r}: {exc}") from None
    return list(out.values())


def parse_alert(spec: str) -> tuple[str, tuple[int, ...]]:
    """One `--alert NAME:PCT[,PCT...]` value: (limit name, thresholds in percent)."""
    name, sep, values = spec.strip().partition(":")
    parts = [p.strip().rstrip("%") for p in values.split(",")]
    if not sep or not name or not all(p.isdigit() for p in parts):
        raise SpecError(
            f"cannot read --alert {spec!r}: write NAME:PCT[,PCT...], e.g. weekly:80,100"
        )
    return name.strip(), tuple(int(p) for p in parts)


def _names(limits: dict[str, Limit]) -> str:
    return ", ".join(limits) if limits else "none"


def parse_limits(
    specs: Sequence[str],
    soft: Sequence[str] = (),
    schedules: Sequence[str] = (),
    alerts: Sequence[str] = (),
) -> list[Limit]:
    """Every `-l` value, then `--soft`, `--schedule` and `--alert`; names must be unique."""
    parsed = [parse_limit(spec) for spec in specs]
    names = [limit.name for limit in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SpecError(f"limit names must be unique: {', '.join(duplicates)} given twice")
    return build_limits(parsed, soft, schedules, alerts)


def parse_amount(spec: str, *, allow_zero: bool = False) -> tuple[str, int]:
    """`NAME:N` (for `--need` and `--add`)."""
    name, sep, value = spec.strip().partition(":")
    if not sep or not name:
        raise SpecError(f"cannot read {spec!r}: write NAME:N, e.g. weekly:20000000")
    amount = _int(value.strip(), "the amount", spec)
    if amount < (0 if allow_zero else 1):
        raise SpecError(f"the amount in {spec!r} must be {'>= 0' if allow_zero else '> 0'}")
    return name.strip(), amount


def parse_amounts(specs: Sequence[str], *, allow_zero: bool = False) -> dict[str, int]:
    out: dict[str, int] = {}
    for spec in specs:
        name, amount = parse_amount(spec, allow_zero=allow_zero)
        if name in out:
            raise SpecError(f"{name!r} is given twice")
        out[name] = amount
    return out


# --- printing ----------------------------------------------------------------------------------


def format_period(seconds: int) -> str:
    """`/min`, `/day`, `/10sec`... ('' for the default minute)."""
    for unit in ("day", "hour", "min"):
        size = UNIT_SECONDS[unit]
        if seconds % size == 0:
            count = seconds // size
            if unit == "min" and count == 1:
                return ""
            return f"/{count if count != 1 else ''}{unit}"
    return f"/{seconds if seconds != 1 else ''}sec"


def _cron_arg(entry: ScheduleEntry) -> str:
    return entry.cron if entry.tz == "UTC" else f"{entry.cron}, {entry.tz}"


def format_limit(limit: Limit) -> str:
    """The `-l` text for a limit (soft-ness and schedules are printed separately)."""
    if limit.concurrent:
        ttl = limit.lease_ttl_seconds or DEFAULT_LEASE_TTL_SECONDS
        lease_ttl = "" if ttl == DEFAULT_LEASE_TTL_SECONDS else f"({format_duration(ttl)})"
        return f"{limit.name}:{limit.capacity}@concurrent{lease_ttl}"
    if limit.reset_after is not None:
        after = format_duration(limit.reset_after_seconds or 0)
        return f"{limit.name}:{limit.capacity}@after({after})"
    if limit.reset_schedule:
        return f"{limit.name}:{limit.capacity}@cron({_cron_arg(limit.reset_schedule[0])})"
    text = f"{limit.name}:{limit.refill_amount}{format_period(limit.refill_period_seconds)}"
    if limit.capacity != limit.refill_amount:
        text += f":{limit.capacity}"
    return text


def format_schedule(name: str, entry: ScheduleEntry) -> str:
    """The `--schedule` text for one schedule entry."""
    fields = []
    if entry.scale is not None:
        fields.append(f"scale={entry.scale:g}")
    for key, value in (
        ("capacity", entry.capacity),
        ("refill_amount", entry.refill_amount),
        ("refill_period", entry.refill_period_seconds),
    ):
        if value is not None:
            fields.append(f"{key}={value}")
    return f"{name}@cron({_cron_arg(entry)}):{','.join(fields)}"


def describe(limit: Limit) -> str:
    """One line for people: the `-l` text, `(soft)`, and schedules."""
    text = format_limit(limit)
    if len(limit.reset_schedule) > 1:
        text += " +" + " +".join(f"cron({_cron_arg(e)})" for e in limit.reset_schedule[1:])
    if limit.soft:
        text += " (soft)"
    if limit.alert_at:
        text += " alert at " + ",".join(f"{p}%" for p in limit.alert_at)
    for entry in limit.schedule:
        text += f" [{format_schedule(limit.name, entry)}]"
    return text


def to_args(limits: Sequence[Limit]) -> list[str]:
    """Command-line arguments that rebuild `limits` (`-l`, `--soft`, `--schedule`)."""
    args: list[str] = []
    for limit in limits:
        args += ["-l", format_limit(limit)]
    for limit in limits:
        if limit.soft:
            args += ["--soft", limit.name]
        if limit.alert_at:
            args += ["--alert", f"{limit.name}:{','.join(map(str, limit.alert_at))}"]
        for entry in limit.schedule:
            args += ["--schedule", format_schedule(limit.name, entry)]
    return args
