"""Reading what the table holds for a manifest, and the manifest's own record in the table.

The record (`keys.manifest_state(ns)`) says which levels and parent links the manifest manages,
holds the work an apply owes (so an interrupted apply resumes), a revision number and a lock
(so a second concurrent apply fails without writing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ..dynamo import keys
from ..dynamo.transport import ConditionFailed
from ..errors import ZAELimiterError
from ..validation import DEFAULT_RESOURCE
from .model import Level, Manifest, SystemLevel
from .plan import Change, EntityState, Ownership, Stored

if TYPE_CHECKING:
    from ..repository import Repository

T = TypeVar("T")
READ_CONCURRENCY = 16
LOCK_MS = 120_000


class ConcurrentApplyError(ZAELimiterError):
    """Another apply ran or is running since this plan was made; nothing was written."""


# --- stored config --------------------------------------------------------------------------------


async def gather_limited(reads: Iterable[Awaitable[T]]) -> list[T]:
    """Await every read, at most READ_CONCURRENCY at a time; results in order."""
    gate = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(read: Awaitable[T]) -> T:
        async with gate:
            return await read

    return list(await asyncio.gather(*(one(r) for r in reads)))


async def resource_level(repo: Repository, resource: str) -> Level:
    limits, disabled, cascade = await asyncio.gather(
        repo.get_resource_defaults(resource),
        repo.get_resource_disabled(resource),
        repo.get_resource_cascade(resource),
    )
    return Level(tuple(limits) or None, disabled, cascade)


async def entity_level(repo: Repository, entity_id: str, resource: str) -> Level:
    limits, disabled, cascade = await asyncio.gather(
        repo.get_limits(entity_id, resource),
        repo.get_entity_disabled(entity_id, resource),
        repo.get_entity_cascade(entity_id, resource),
    )
    return Level(tuple(limits) or None, disabled, cascade)


async def system_level(repo: Repository) -> SystemLevel:
    limits, mode = await repo.get_system_defaults()
    return SystemLevel(tuple(limits) or None, mode)


async def entity_state(repo: Repository, entity_id: str) -> EntityState:
    entity = await repo.get_entity(entity_id, consistent_read=True)
    return EntityState(False) if entity is None else EntityState(True, entity.parent_id)


async def _has_custom_limits(repo: Repository, resource: str) -> bool:
    ids, _ = await repo.list_entities_with_custom_limits(resource, limit=1)
    return bool(ids)


async def _children(repo: Repository, entity_id: str) -> tuple[str, ...]:
    return tuple(child.id for child in await repo.get_children(entity_id))


async def _shard_count(repo: Repository, entity_id: str, resource: str) -> int:
    """The entity's bucket's shard count for `resource` (0: no bucket)."""
    return max((b.shard_count for b in await repo.get_buckets(entity_id, resource)), default=0)


async def read_stored(repo: Repository, manifest: Manifest, owned: Ownership) -> Stored:
    """Everything a plan compares: declared and previously managed levels, entities, parents."""
    resources = set(manifest.resources) | set(owned.resources)
    resources |= {
        r for spec in manifest.entities.values() for r in spec.levels if r != DEFAULT_RESOURCE
    }
    levels = {(e, r) for e, spec in manifest.entities.items() for r in spec.levels}
    levels |= set(owned.entity_levels)
    entities = set(manifest.entities) | set(manifest.child_parents().values()) | set(owned.parents)
    with_children = set(manifest.child_parents()) | {
        e
        for e, spec in manifest.entities.items()
        if any(lim.soft for level in spec.levels.values() for lim in level.limits or ())
    }
    cascading = {r for r, level in manifest.resources.items() if level.cascade is True}
    if cascading:
        cascading.add(DEFAULT_RESOURCE)
    resource_list, level_list = sorted(resources), sorted(levels)
    entity_list, children_list, custom_list = (
        sorted(entities),
        sorted(with_children),
        sorted(cascading),
    )
    reads: list[Awaitable[Any]] = [system_level(repo)]
    reads += [resource_level(repo, r) for r in resource_list]
    reads += [entity_level(repo, e, r) for e, r in level_list]
    reads += [entity_state(repo, e) for e in entity_list]
    reads += [_children(repo, e) for e in children_list]
    reads += [_has_custom_limits(repo, r) for r in custom_list]
    shard_list = sorted((e, r) for e, spec in manifest.entities.items() for r in spec.shards)
    reads += [_shard_count(repo, e, r) for e, r in shard_list]
    results = iter(await gather_limited(reads))
    stored = Stored(system=next(results))
    stored.resources = {r: next(results) for r in resource_list}
    stored.entity_levels = {key: next(results) for key in level_list}
    stored.entities = {e: next(results) for e in entity_list}
    stored.children = {e: next(results) for e in children_list}
    stored.custom_limits = {r: next(results) for r in custom_list}
    stored.shards = {key: next(results) for key in shard_list}
    return stored


# --- the manifest's record ------------------------------------------------------------------------


def _managed_json(owned: Ownership) -> str:
    return json.dumps(
        {
            "system": owned.system,
            "resources": sorted(owned.resources),
            "entity_levels": sorted([e, r] for e, r in owned.entity_levels),
            "parents": sorted(owned.parents),
        },
        sort_keys=True,
    )


async def read_ownership(repo: Repository) -> Ownership:
    """The manifest's record for this namespace (an empty Ownership if there is none)."""
    item = await repo._store.get(keys.manifest_state(repo.namespace_id), consistent=True)
    if item is None:
        return Ownership()
    managed = json.loads(item.get("managed") or "{}")
    pending = tuple(Change.from_dict(c) for c in json.loads(item.get("pending") or "[]"))
    return Ownership(
        system=bool(managed.get("system")),
        resources=frozenset(managed.get("resources", ())),
        entity_levels=frozenset((e, r) for e, r in managed.get("entity_levels", ())),
        parents=frozenset(managed.get("parents", ())),
        rev=int(item.get("rev", 0)),
        pending=pending,
        done=int(item.get("done", 0)),
        lock_owner=str(item.get("lock_owner") or ""),
        lock_until_ms=int(item.get("lock_until", 0)),
    )


async def lock(
    repo: Repository,
    base: Ownership,
    *,
    owner: str,
    managed: Ownership,
    pending: tuple[Change, ...],
    now_ms: int,
) -> None:
    """Take the record for one apply: only if nobody changed it since `base` was read."""
    key = keys.manifest_state(repo.namespace_id)
    values: dict[str, Any] = {
        ":managed": _managed_json(managed),
        ":pending": json.dumps([c.as_dict(with_before=False) for c in pending]),
        ":zero": 0,
        ":owner": owner,
        ":until": now_ms + LOCK_MS,
        ":one": 1,
        ":ns": repo.namespace_id,
        ":g4": f"{key['PK']}#{key['SK']}",
    }
    if base.rev is None:
        condition = "attribute_not_exists(PK)"
    else:
        condition = "rev = :rev AND (attribute_not_exists(lock_until) OR lock_until < :now)"
        values |= {":rev": base.rev, ":now": now_ms}
    try:
        await repo._store.update(
            key,
            "SET managed = :managed, pending = :pending, done = :zero, lock_owner = :owner, "
            "lock_until = :until, GSI4PK = :ns, GSI4SK = :g4 ADD rev :one",
            condition=condition,
            values=values,
            return_new=False,
        )
    except ConditionFailed:
        raise ConcurrentApplyError(
            "another `limits apply` changed this namespace's manifest state since the plan was "
            "made, or is running now; nothing was written. Re-plan (`zae-limiter limits plan`) "
            "and apply again."
        ) from None


async def progress(
    repo: Repository, *, owner: str, done: int, now_ms: int, release: bool = False
) -> None:
    """Record that the first `done` owed changes are complete, and extend (or release) the lock."""
    try:
        await repo._store.update(
            keys.manifest_state(repo.namespace_id),
            "SET done = :done, lock_until = :until",
            condition="lock_owner = :owner",
            values={":done": done, ":until": 0 if release else now_ms + LOCK_MS, ":owner": owner},
            return_new=False,
        )
    except ConditionFailed:
        raise ConcurrentApplyError(
            "this apply lost its lock on the manifest state (it was held too long and another "
            "apply took over); re-plan and apply again"
        ) from None


async def finish(repo: Repository, *, owner: str, managed: Ownership) -> None:
    """Record what the manifest now manages, clear the owed work and release the lock."""
    try:
        await repo._store.update(
            keys.manifest_state(repo.namespace_id),
            "SET managed = :managed ADD rev :one REMOVE pending, done, lock_owner, lock_until",
            condition="lock_owner = :owner",
            values={":managed": _managed_json(managed), ":one": 1, ":owner": owner},
            return_new=False,
        )
    except ConditionFailed:
        raise ConcurrentApplyError(
            "this apply lost its lock on the manifest state before it finished; re-plan and "
            "apply again"
        ) from None
