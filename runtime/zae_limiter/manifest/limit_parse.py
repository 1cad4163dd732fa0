"""The `limits:` mapping of a manifest (docs/manifest.md) and `--limits-file`: each limit's
fields, every problem reported at its own path (a limit's type errors, then what the library
refuses in each sound field on its own)."""

from __future__ import annotations

from functools import partial
from typing import Any

from .. import concurrent_limits, validation
from ..errors import ValidationError
from ..limits import Limit, ScheduleEntry
from .fields import Problems, boolean, checked, integer, kind, known, mapping, string
from .model import ManifestError
from .source import join_path

#: What a concurrency limit never has: it holds, it does not drip or reset.
NOT_HELD_KEYS = (
    "refill_amount",
    "refill_period",
    "refill_period_seconds",
    "reset_schedule",
    "reset_after_seconds",
    "schedule",
)
LIMIT_KEYS = ("capacity", *NOT_HELD_KEYS, "soft", "concurrent", "lease_ttl_seconds", "alert_at")
RESET_KEYS = ("cron", "tz")
SCHEDULE_KEYS = (
    "cron",
    "tz",
    "scale",
    "capacity",
    "refill_amount",
    "refill_period",
    "refill_period_seconds",
)


def _edge(raw: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    return known(raw, path, keys, partial(_edge_fields, path=path))


def _edge_fields(entry: dict[str, Any], path: str) -> dict[str, Any]:
    """One `{cron, tz, ...}` entry; every field's problem is reported, then the entry as the
    library checks it (cron syntax, time zone, scale)."""
    problems = Problems()
    out: dict[str, Any] = {}
    if "cron" not in entry:
        problems.errors.append(ManifestError(path, 'needs a cron expression (cron: "0 0 * * 1")'))
    for key in ("cron", "tz"):
        if key in entry:
            _put(out, key, problems, partial(string, entry[key], join_path(path, key)))
    if "scale" in entry:
        _put(out, "scale", problems, partial(_scale, entry["scale"], join_path(path, "scale")))
    if "refill_period" in entry and "refill_period_seconds" in entry:
        problems.errors.append(
            ManifestError(path, "give refill_period or refill_period_seconds, not both")
        )
    for key in ("capacity", "refill_amount", "refill_period", "refill_period_seconds"):
        if key in entry:
            name = "refill_period_seconds" if key == "refill_period" else key
            _put(out, name, problems, partial(integer, entry[key], join_path(path, key)))
    problems.raise_any()
    checked(path, partial(ScheduleEntry.from_dict, out))
    return out


def _scale(value: Any, path: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ManifestError(path, f"must be a number, not {kind(value)}")
    return value


def _put(out: dict[str, Any], key: str, problems: Problems, parse: Any) -> None:
    """`out[key] = parse()`, or the problem noted and the key left out."""
    value = problems.check(parse)
    if value is not None:
        out[key] = value


def _edges(raw: Any, path: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ManifestError(
            path, f"must be a non-empty list of {{cron, tz}} entries, not {kind(raw)}"
        )
    problems = Problems()
    entries = [problems.check(partial(_edge, e, f"{path}[{i}]", keys)) for i, e in enumerate(raw)]
    problems.raise_any()
    return entries


def parse_limit(name: Any, raw: Any, path: str) -> Limit:
    """One entry of a `limits:` mapping (docs/manifest.md)."""
    checked(path, lambda: validation.limit_name(name))
    return known(raw, path, LIMIT_KEYS, partial(_limit_fields, name, path=path))


def _limit_fields(name: str, fields: dict[str, Any], path: str) -> Limit:
    """Every field's problem is reported, each at its own path; then the limit as the library
    checks it (ranges, drip against reset), each part on its own when the whole fails."""
    problems = Problems()
    data: dict[str, Any] = {}
    if "capacity" not in fields:
        problems.errors.append(ManifestError(path, "needs a capacity"))
    else:
        _put(data, "capacity", problems, partial(integer, fields["capacity"], f"{path}.capacity"))
    held = problems.check(partial(_concurrency, fields, path)) or {}
    data.update(held)
    if fields.get("concurrent") is True:  # what it must not have is reported by _concurrency
        fields = {k: v for k, v in fields.items() if k not in NOT_HELD_KEYS}
    if "refill_period" in fields and "refill_period_seconds" in fields:
        problems.errors.append(
            ManifestError(path, "give refill_period or refill_period_seconds, not both")
        )
    for key in ("refill_amount", "refill_period", "refill_period_seconds", "reset_after_seconds"):
        if key in fields:
            _put(data, key, problems, partial(integer, fields[key], join_path(path, key)))
    if "soft" in fields:
        _put(data, "soft", problems, partial(boolean, fields["soft"], join_path(path, "soft")))
    if "alert_at" in fields:
        _put(data, "alert_at", problems, partial(_alert_at, fields["alert_at"], path))
    for key, keys in (("reset_schedule", RESET_KEYS), ("schedule", SCHEDULE_KEYS)):
        if key in fields:
            _put(data, key, problems, partial(_edges, fields[key], join_path(path, key), keys))
    if "reset_schedule" in fields and "reset_after_seconds" in fields:
        problems.errors.append(
            ManifestError(
                path, "a quota resets on reset_schedule or after reset_after_seconds, not both"
            )
        )
    period = "refill_period" if "refill_period" in fields else "refill_period_seconds"
    if period in fields and ("reset_schedule" in fields or "reset_after_seconds" in fields):
        problems.errors.append(
            ManifestError(f"{path}.{period}", "a quota never drips: leave the refill period out")
        )
    if problems.errors:  # and what the fields that are sound break on their own
        problems.errors += _alone(name, data, path)
    problems.raise_any()
    return _built(name, data, path)


def _alert_at(raw: Any, path: str) -> list[int]:
    at = join_path(path, "alert_at")
    if not isinstance(raw, list) or not raw:
        raise ManifestError(
            at, f"must be a list of whole percents (alert_at: [80, 100]), not {kind(raw)}"
        )
    problems = Problems()
    percents = [problems.check(partial(integer, x, f"{at}[{i}]")) for i, x in enumerate(raw)]
    problems.raise_any()
    return percents


#: A limit's fields checked on their own when the whole limit fails the library's checks, each
#: beside the fields that decide its kind (so that a quota's capacity is judged as a quota's).
_KIND_KEYS = ("reset_schedule", "reset_after_seconds", "concurrent", "lease_ttl_seconds", "soft")
_ALONE = ("capacity", "refill_amount", "refill_period", "refill_period_seconds", "alert_at")


def _built(name: str, data: dict[str, Any], path: str) -> Limit:
    """The limit; when the library refuses it, each field that it refuses on its own too is
    reported at that field's path, beside the whole limit's first problem."""
    try:
        return Limit.from_dict(name, data)
    except ValidationError as whole:
        problems = _alone(name, data, path)
        if not any(p.reason == str(whole) for p in problems):
            problems.insert(0, ManifestError(path, str(whole), whole.value))
        raise ManifestError.several(problems) from None


def _alone(name: str, data: dict[str, Any], path: str) -> list[ManifestError]:
    """What the library refuses in each of the limit's fields on its own (beside the fields
    that decide the limit's kind), at that field's path."""
    base = {"capacity": 1, **{k: data[k] for k in _KIND_KEYS if k in data}}
    if _refused(name, base):
        return []  # the kind itself is wrong: reported as the whole limit's problem
    return [
        ManifestError(join_path(path, key), str(exc), exc.value)
        for key in _ALONE
        if key in data
        for exc in _refused(name, {**base, key: data[key]})
    ]


def _refused(name: str, data: dict[str, Any]) -> list[ValidationError]:
    try:
        Limit.from_dict(name, data)
    except ValidationError as exc:
        return [exc]
    return []


def _concurrency(fields: dict[str, Any], path: str) -> dict[str, Any]:
    """`concurrent` and `lease_ttl_seconds`; every misplaced key is reported at its own path."""
    problems = Problems()
    concurrent = False
    if "concurrent" in fields:
        concurrent = problems.check(
            partial(boolean, fields["concurrent"], join_path(path, "concurrent"))
        )
    out: dict[str, Any] = {"concurrent": True} if concurrent is True else {}
    if "lease_ttl_seconds" in fields:
        at = join_path(path, "lease_ttl_seconds")
        if concurrent is not True:
            reason = "only a concurrency limit has a lease: add concurrent: true or leave it out"
            problems.errors.append(ManifestError(at, reason))
        else:
            out["lease_ttl_seconds"] = problems.check(
                partial(_lease_ttl, fields["lease_ttl_seconds"], at)
            )
    if concurrent is True:
        problems.errors += [
            ManifestError(
                join_path(path, key),
                f"a concurrency limit never drips or resets (a hold comes back when its lease "
                f"ends): leave {key} out",
            )
            for key in NOT_HELD_KEYS
            if key in fields
        ]
    problems.raise_any()
    return out


def _lease_ttl(value: Any, path: str) -> int:
    seconds = integer(value, path)
    low, high = concurrent_limits.MIN_LEASE_TTL_SECONDS, concurrent_limits.MAX_LEASE_TTL_SECONDS
    if not low <= seconds <= high:
        raise ManifestError(path, f"must be from {low} to {high} seconds (1 day)", value)
    return seconds


def parse_limits(raw: Any, path: str = "limits") -> tuple[Limit, ...]:
    """A `limits:` mapping (name -> fields), as used by the manifest and `--limits-file`."""
    limits = mapping(raw, path)
    if not limits:
        raise ManifestError(path, "declare at least one limit, or leave `limits` out")
    problems = Problems()
    parsed = [
        problems.check(partial(parse_limit, name, fields, join_path(path, name)))
        for name, fields in limits.items()
    ]
    problems.raise_any()
    return tuple(parsed)
