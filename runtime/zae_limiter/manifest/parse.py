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

from .. import validation
from ..limits import Limit
from ..models import OnUnavailable
from ..validation import DEFAULT_RESOURCE
from .fields import (
    Problems,
    checked,
    integer,
    known,
    mapping,
    string,
)
from .limit_parse import parse_limits
from .model import UNSET, EntitySpec, LevelSpec, Manifest, ManifestError, Places, SystemSpec
from .source import join_path, load_with_lines, load_yaml, locate

TOP_LEVEL = ("namespace", "system", "resources", "entities")
LEVEL_KEYS = ("limits", "cascade", "disabled")
SYSTEM_KEYS = ("limits", "on_unavailable")
ENTITY_KEYS = ("parent", "resources")
SHARD_COUNTS = (1, 2, 4, 8, 16, 32)


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


# --- levels ----------------------------------------------------------------------------------


def _disabled(value: Any, path: str) -> bool | str | None:
    if value is None or isinstance(value, bool) or value == "bypass":
        return value  # type: ignore[no-any-return]
    raise ManifestError(path, "must be true, false or bypass (leave it out to inherit)", value)


def _cascade(value: Any, path: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ManifestError(path, "must be true or false (leave it out to inherit)", value)


def _level(raw: Any, path: str) -> LevelSpec:
    return known(raw, path, LEVEL_KEYS, partial(_level_fields, path=path))


def _level_fields(fields: dict[str, Any], path: str) -> LevelSpec:
    problems = Problems()
    limits = None
    if "limits" in fields:
        limits = problems.check(partial(parse_limits, fields["limits"], join_path(path, "limits")))
    disabled = problems.check(
        partial(_disabled, fields.get("disabled"), join_path(path, "disabled"))
    )
    cascade = problems.check(partial(_cascade, fields.get("cascade"), join_path(path, "cascade")))
    problems.raise_any()
    return LevelSpec(limits=limits, disabled=disabled, cascade=cascade)


def _system(raw: Any) -> SystemSpec:
    fields = mapping(raw, "system")
    for key in fields:
        if key in ("cascade", "disabled"):
            raise ManifestError(
                f"system.{key}", f"{key} is set per resource or entity, never at system level"
            )
    return known(fields, "system", SYSTEM_KEYS, _system_fields)


def _system_fields(fields: dict[str, Any]) -> SystemSpec:
    if "limits" not in fields:
        raise ManifestError("system", "needs limits (on_unavailable is stored with them)")
    mode = fields.get("on_unavailable")
    if mode is not None and mode not in ("allow", "block"):
        raise ManifestError("system.on_unavailable", "must be allow or block", mode)
    return SystemSpec(
        limits=parse_limits(fields["limits"], "system.limits"),
        on_unavailable=OnUnavailable(mode) if mode else None,
    )


def _resources(raw: Any) -> dict[str, LevelSpec]:
    out: dict[str, LevelSpec] = {}
    problems = Problems()
    for name, level in mapping(raw, "resources").items():
        path = f"resources.{name}"

        def one(name: str = name, level: Any = level, path: str = path) -> LevelSpec:
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
    levels: dict[str, LevelSpec] = {}
    shards: dict[str, int] = {}
    problems = Problems()
    for resource, level in mapping(fields.get("resources") or {}, f"{path}.resources").items():
        where = f"{path}.resources.{resource}"

        def one(resource: str = resource, level: Any = level, where: str = where) -> LevelSpec:
            if resource != DEFAULT_RESOURCE:
                checked(where, partial(validation.resource_name, resource))

            def build(raw: dict[str, Any]) -> LevelSpec:
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
