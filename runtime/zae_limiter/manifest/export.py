"""`limits export`: the namespace's stored config written out as a manifest."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from ..validation import DEFAULT_RESOURCE
from .model import LevelSpec
from .plan import limits_to_manifest
from .state import (
    entity_level,
    entity_state,
    gather_limited,
    read_ownership,
    resource_level,
    system_level,
)

if TYPE_CHECKING:
    from ..repository import Repository


def _level_dict(level: LevelSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if level.cascade is not None:
        out["cascade"] = level.cascade
    if level.disabled is not None:
        out["disabled"] = level.disabled
    if level.limits is not None:
        out["limits"] = limits_to_manifest(level.limits)
    return out


async def _entities_with_config(repo: Repository) -> dict[str, set[str]]:
    """{entity: resources (or _default_) it has limits for}."""
    found: dict[str, set[str]] = {}
    for resource in [DEFAULT_RESOURCE, *await repo.list_resources_with_entity_configs()]:
        cursor: str | None = None
        while True:
            ids, cursor = await repo.list_entities_with_custom_limits(resource, cursor=cursor)
            for entity_id in ids:
                found.setdefault(entity_id, set()).add(resource)
            if not cursor:
                break
    return found


async def export_manifest(repo: Repository, *, entities: bool = True) -> dict[str, Any]:
    """The stored config as a manifest document: system defaults, every resource with defaults
    (or levels the manifest manages), and with `entities` every entity with limits of its own."""
    owned = await read_ownership(repo)
    resources = sorted(set(await repo.list_resources_with_defaults()) | set(owned.resources))
    system = await system_level(repo)
    levels = await gather_limited(resource_level(repo, r) for r in resources)
    document: dict[str, Any] = {"namespace": repo.namespace_name}
    if system.limits is not None:
        document["system"] = {"limits": limits_to_manifest(system.limits)}
        if system.on_unavailable is not None:
            document["system"]["on_unavailable"] = system.on_unavailable.value
    resource_docs = {r: _level_dict(level) for r, level in zip(resources, levels, strict=True)}
    if resource_docs := {r: doc for r, doc in resource_docs.items() if doc}:
        document["resources"] = resource_docs
    if entities:
        configured = await _entities_with_config(repo)
        for entity_id, resource in owned.entity_levels:
            configured.setdefault(entity_id, set()).add(resource)
        for entity_id in owned.parents:
            configured.setdefault(entity_id, set())
        pairs = sorted((e, r) for e, rs in configured.items() for r in rs)
        ids = sorted(configured)
        found = await gather_limited(entity_level(repo, e, r) for e, r in pairs)
        states = await gather_limited(entity_state(repo, e) for e in ids)
        entity_docs: dict[str, dict[str, Any]] = {e: {} for e in ids}
        for (entity_id, resource), level in zip(pairs, found, strict=True):
            doc = _level_dict(level)
            if doc:
                entity_docs[entity_id].setdefault("resources", {})[resource] = doc
        for entity_id, state in zip(ids, states, strict=True):
            if state.parent is not None:
                entity_docs[entity_id] = {"parent": state.parent, **entity_docs[entity_id]}
        if entity_docs := {e: doc for e, doc in entity_docs.items() if doc}:
            document["entities"] = entity_docs
    return document


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
