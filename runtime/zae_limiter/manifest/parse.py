"""Reading a limits manifest (docs/manifest.md): YAML, parsed safely, checked entirely.

Top-level keys: `namespace` (required), `system`, `resources`, `entities`; any top-level `x-...` key
is ignored (a place for YAML anchors). Every other unknown key, at any depth, is an error naming
its path. Numbers must be YAML integers. Only the manifest itself is checked here (names, numbers,
cron, time zones, drip vs reset, flag values, parents declared in the manifest); checks against
the table are in `plan`.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from .. import concurrent_limits, validation
from ..errors import ValidationError
from ..limits import Limit, ScheduleEntry
from ..models import OnUnavailable
from ..validation import DEFAULT_RESOURCE
from .fields import (
    Problems,
    boolean,
    checked,
    integer,
    kind,
    known,
    mapping,
    string,
)
from .model import UNSET, EntitySpec, Level, Manifest, ManifestError, Places, SystemLevel
from .source import join_path, load_with_lines, load_yaml, locate

TOP_LEVEL = ("namespace", "system", "resources", "entities")
LEVEL_KEYS = ("limits", "cascade", "disabled")
SYSTEM_KEYS = ("limits", "on_unavailable")
ENTITY_KEYS = ("parent", "resources")
SHARD_COUNTS = (1, 2, 4, 8, 16, 32)
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


def _parse_located(text: str, source: str) -> Manifest:
    """Parse and check; every problem is reported, each with `source:line:column`, in order,
    those of a key's earlier copies (written twice) too."""
    loaded = load_with_lines(text, source)
    problems = locate(loaded.problems, source, loaded.lines)
    manifest = None
    for document, lines in [(loaded.document, loaded.lines), *loaded.shadowed]:
        try:
            parsed = parse(document)
        except ManifestError as error:
            problems += locate(error.errors, source, lines)
        else:
            manifest = manifest or parsed
    if problems:
        raise ManifestError.several(_once(problems)) from None
    assert manifest is not None
    return replace(manifest, places=Places(source, loaded.lines))


def _once(problems: list[ManifestError]) -> list[ManifestError]:
    """Each problem once (the copies of a document repeat the problems they share), in file
    order."""
    unique = {(e.line, e.column, e.path, e.reason): e for e in reversed(problems)}
    return sorted(unique.values(), key=lambda e: (e.line or 0, e.column or 0, e.path))


def load_file(path: str | Path) -> Manifest:
    """Read and check a manifest file."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as exc:
        raise ManifestError("", f"cannot read {file}: {exc.strerror or exc}") from None
    return _parse_located(text, str(file))


def loads(text: str) -> Manifest:
    """Parse and check manifest text; each problem's `.line` says where."""
    return _parse_located(text, "")


def load_file_limits(path: str | Path) -> tuple[Limit, ...]:
    """A file holding one level's limits in the manifest's `limits:` format (`--limits-file`):
    the mapping itself, or a document whose only key is `limits`."""
    file = Path(path)
    try:
        document = load_yaml(file.read_text(), str(file))
    except OSError as exc:
        raise ManifestError("", f"cannot read {file}: {exc.strerror or exc}") from None
    if (
        isinstance(document, dict)
        and list(document) == ["limits"]
        and isinstance(document["limits"], dict)
        and all(isinstance(v, dict) for v in document["limits"].values())
    ):
        return parse_limits(document["limits"], "limits")
    return parse_limits(document, str(file.name))


# --- limits --------------------------------------------------------------------------------------


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


# --- levels ----------------------------------------------------------------------------------


def _disabled(value: Any, path: str) -> bool | str | None:
    if value is None or isinstance(value, bool) or value == "bypass":
        return value  # type: ignore[no-any-return]
    raise ManifestError(path, "must be true, false or bypass (leave it out to inherit)", value)


def _cascade(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ManifestError(path, "must be true or false (leave it out to inherit)", value)


def _level(raw: Any, path: str) -> Level:
    return known(raw, path, LEVEL_KEYS, partial(_level_fields, path=path))


def _level_fields(fields: dict[str, Any], path: str) -> Level:
    problems = Problems()
    limits = None
    if "limits" in fields:
        limits = problems.check(partial(parse_limits, fields["limits"], join_path(path, "limits")))
    disabled = problems.check(
        partial(_disabled, fields.get("disabled"), join_path(path, "disabled"))
    )
    cascade = problems.check(partial(_cascade, fields.get("cascade"), join_path(path, "cascade")))
    problems.raise_any()
    return Level(limits=limits, disabled=disabled, cascade=cascade)


def _system(raw: Any) -> SystemLevel:
    fields = mapping(raw, "system")
    for key in fields:
        if key in ("cascade", "disabled"):
            raise ManifestError(
                f"system.{key}", f"{key} is set per resource or entity, never at system level"
            )
    return known(fields, "system", SYSTEM_KEYS, _system_fields)


def _system_fields(fields: dict[str, Any]) -> SystemLevel:
    if "limits" not in fields:
        raise ManifestError("system", "needs limits (on_unavailable is stored with them)")
    mode = fields.get("on_unavailable")
    if mode is not None and mode not in ("allow", "block"):
        raise ManifestError("system.on_unavailable", "must be allow or block", mode)
    return SystemLevel(
        limits=parse_limits(fields["limits"], "system.limits"),
        on_unavailable=OnUnavailable(mode) if mode else None,
    )


def _resources(raw: Any) -> dict[str, Level]:
    out: dict[str, Level] = {}
    problems = Problems()
    for name, level in mapping(raw, "resources").items():
        path = f"resources.{name}"

        def one(name: str = name, level: Any = level, path: str = path) -> Level:
            checked(path, partial(validation.resource_name, name))
            return _level(level, path)

        out[name] = problems.check(one)
    problems.raise_any()
    return out


def _entities(raw: Any) -> dict[str, EntitySpec]:
    out: dict[str, EntitySpec] = {}
    problems = Problems()
    for entity_id, body in mapping(raw, "entities").items():
        out[entity_id] = problems.check(partial(_entity, entity_id, body))
    problems.raise_any()
    return out


def _entity(entity_id: str, body: Any) -> EntitySpec:
    path = f"entities.{entity_id}"
    checked(path, partial(validation.entity_id, entity_id))
    return known(
        {} if body is None else body, path, ENTITY_KEYS, partial(_entity_fields, entity_id)
    )


def _entity_fields(entity_id: str, fields: dict[str, Any]) -> EntitySpec:
    path = f"entities.{entity_id}"
    parent: Any = UNSET
    if "parent" in fields:
        parent = fields["parent"]
        if parent is not None:
            string(parent, f"{path}.parent")
            checked(f"{path}.parent", partial(validation.entity_id, parent, "parent"))
            if parent == entity_id:
                raise ManifestError(f"{path}.parent", "an entity cannot be its own parent")
    levels: dict[str, Level] = {}
    shards: dict[str, int] = {}
    problems = Problems()
    for resource, level in mapping(fields.get("resources") or {}, f"{path}.resources").items():
        where = f"{path}.resources.{resource}"

        def one(resource: str = resource, level: Any = level, where: str = where) -> Level:
            if resource != DEFAULT_RESOURCE:
                checked(where, partial(validation.resource_name, resource))

            def build(raw: dict[str, Any]) -> Level:
                if "shards" in raw:
                    shards[resource] = _shards(raw.pop("shards"), resource, f"{where}.shards")
                return _level(raw, where)

            return known(level, where, (*LEVEL_KEYS, "shards"), build)

        levels[resource] = problems.check(one)
    problems.raise_any()
    return EntitySpec(parent=parent, levels=levels, shards=shards)


def _shards(value: Any, resource: str, path: str) -> int:
    """An entity's `shards:` for one resource: pre-split its bucket (docs/sharding.md)."""
    if resource == DEFAULT_RESOURCE:
        raise ManifestError(path, "shards are set per resource, never on _default_", value)
    count = integer(value, path)
    if count not in SHARD_COUNTS:
        raise ManifestError(path, f"must be one of {', '.join(map(str, SHARD_COUNTS))}", value)
    return count


def _check_parents(entities: dict[str, EntitySpec]) -> None:
    """Two levels only, within the manifest: a declared parent must not itself have a parent."""
    for entity_id, spec in entities.items():
        parent = spec.parent if spec.manages_parent else None
        if parent is None or parent not in entities:
            continue
        grand = entities[parent].parent
        if entities[parent].manages_parent and grand is not None:
            raise ManifestError(
                f"entities.{entity_id}.parent",
                f"{parent!r} has a parent itself ({grand!r}); only two levels (user and "
                "organisation) are allowed",
            )


def parse(document: Any) -> Manifest:
    """Check a loaded YAML document and build the Manifest."""
    if document is None:
        raise ManifestError("", "the manifest is empty; it needs at least `namespace:`")
    top = mapping(document, "")
    problems = Problems()
    for key in top:
        if key not in TOP_LEVEL and not key.startswith("x-"):
            problems.errors.append(
                ManifestError(
                    key,
                    f"unknown top-level key; expected {', '.join(TOP_LEVEL)} "
                    "(or an x-... key for anchors)",
                )
            )
    if "namespace" not in top:
        problems.errors.append(ManifestError("namespace", "is required (e.g. namespace: default)"))
    namespace = problems.check(lambda: _namespace(top["namespace"])) if "namespace" in top else ""
    entities = problems.check(
        lambda: _entities(top["entities"]) if top.get("entities") is not None else {}
    )
    if entities is not None:
        problems.check(partial(_check_parents, entities))
    system = problems.check(
        lambda: _system(top["system"]) if top.get("system") is not None else None
    )
    resources = problems.check(
        lambda: _resources(top["resources"]) if top.get("resources") is not None else {}
    )
    problems.raise_any()
    return Manifest(namespace=namespace, system=system, resources=resources, entities=entities)


def _namespace(value: Any) -> str:
    namespace = string(value, "namespace")
    checked("namespace", lambda: validation.namespace_name(namespace))
    return namespace
