"""The checks of a manifest that need the table (docs/manifest.md): parents against the stored
entities, pre-splits against the limits a bucket will have. Every problem is reported, each at
its `file:line` in the manifest (its `Places`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..validation import DEFAULT_RESOURCE
from .model import LevelSpec, Manifest, ManifestError
from .source import locate

if TYPE_CHECKING:
    from ..limits import Limit
    from .plan import Ownership, Stored


def check_against_table(manifest: Manifest, stored: Stored, owned: Ownership) -> None:
    """The checks that need the table; every problem is reported, each at its `file:line` in
    the manifest."""
    problems = parent_problems(manifest, stored) + shard_problems(manifest, stored, owned)
    if problems:
        raise ManifestError.several(located(manifest, problems))


def parent_problems(manifest: Manifest, stored: Stored) -> list[ManifestError]:
    """Parents must exist (manifest or table), be roots, and a child must have no children."""
    managed = {e: s.parent for e, s in manifest.entities.items() if s.manages_parent}
    problems: list[ManifestError] = []
    for entity_id, parent in manifest.child_parents().items():
        path = f"entities.{entity_id}.parent"
        if parent not in manifest.entities and not stored.entity(parent).exists:
            problems.append(
                ManifestError(
                    path,
                    f"the parent {parent!r} does not exist; declare it under "
                    "entities or create it first",
                    parent,
                )
            )
            continue
        grand = managed[parent] if parent in managed else stored.entity(parent).parent
        if grand is not None:
            problems.append(
                ManifestError(
                    path,
                    f"{parent!r} has a parent itself ({grand!r}); only two "
                    "levels (user and organisation) are allowed",
                    parent,
                )
            )
        kids = {c for c, p in managed.items() if p == entity_id}
        kids |= {
            c for c in stored.children.get(entity_id, ()) if managed.get(c, entity_id) == entity_id
        }
        if kids:
            problems.append(
                ManifestError(
                    path,
                    f"{entity_id!r} has children ({', '.join(sorted(kids))}), "
                    "so it cannot be given a parent",
                    parent,
                )
            )
    return problems


def shard_problems(manifest: Manifest, stored: Stored, owned: Ownership) -> list[ManifestError]:
    """A pre-split (`shards:`) must leave every concurrency limit of the bucket at least one
    unit a shard (docs/concurrency.md), judged on the limits the bucket will have after apply."""
    problems = []
    for entity_id, spec in manifest.entities.items():
        for resource, count in spec.shards.items():
            for limit in _limits_after(manifest, stored, owned, entity_id, resource):
                if limit.concurrent and limit.capacity < count:
                    most = 1 << (limit.capacity.bit_length() - 1)
                    problems.append(
                        ManifestError(
                            f"entities.{entity_id}.resources.{resource}.shards",
                            f"splits concurrency limit {limit.name!r} (max_in_flight="
                            f"{limit.capacity}) below one unit per shard: ask for at most "
                            f"{most} shards, or raise its max_in_flight to at least {count}",
                            count,
                        )
                    )
    return problems


def _limits_after(
    manifest: Manifest, stored: Stored, owned: Ownership, entity_id: str, resource: str
) -> tuple[Limit, ...]:
    """The limits an entity's bucket has once the manifest is applied: the first level with
    limits (the manifest's where it declares or managed the level, else the table's)."""
    spec = manifest.entities.get(entity_id)
    for where in (resource, DEFAULT_RESOURCE):
        if spec is not None and where in spec.levels:
            level = spec.levels[where]
        elif (entity_id, where) in owned.entity_levels:
            level = LevelSpec()  # managed before and gone from the manifest: deleted
        else:
            level = stored.level(entity_id, where)
        if level.limits:
            return level.limits
    if resource in manifest.resources:
        defaults = manifest.resources[resource]
    elif resource in owned.resources:
        defaults = LevelSpec()
    else:
        defaults = stored.resources.get(resource, LevelSpec())
    if defaults.limits:
        return defaults.limits
    system = manifest.system or (None if owned.system else stored.system)
    return (system.limits or ()) if system is not None else ()


def located(manifest: Manifest, problems: list[ManifestError]) -> list[ManifestError]:
    """`problems` found against the table, each at its place in the manifest's file."""
    return locate(problems, manifest.places.source, manifest.places.lines)
