"""Reading what the table holds for a manifest, and the manifest's own record in the table.

The record (`keys.manifest_state(ns)`) says which levels and parent links the manifest manages,
holds the work an apply owes (so an interrupted apply resumes), a revision number and a lock
(so a second concurrent apply fails without writing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..connection import public_error
from ..core.ulids import ulid
from ..dynamo import keys
from ..dynamo.transport import ConditionFailed, DynamoError
from ..errors import ZAELimiterError
from ..gathering import gather_or_end
from ..validation import DEFAULT_RESOURCE
from .model import LevelSpec, Manifest, SystemSpec
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

    return list(await gather_or_end(*(one(r) for r in reads)))


async def resource_level(repo: Repository, resource: str) -> LevelSpec:
    limits, disabled, cascade = await gather_or_end(
        repo.get_resource_defaults(resource),
        repo.get_resource_disabled(resource),
        repo.get_resource_cascade(resource),
    )
    return LevelSpec(tuple(limits) or None, disabled, cascade)


async def entity_level(repo: Repository, entity_id: str, resource: str) -> LevelSpec:
    limits, disabled, cascade = await gather_or_end(
        repo.get_limits(entity_id, resource),
        repo.get_entity_disabled(entity_id, resource),
        repo.get_entity_cascade(entity_id, resource),
    )
    return LevelSpec(tuple(limits) or None, disabled, cascade)


async def system_level(repo: Repository) -> SystemSpec:
    limits, mode = await repo.get_system_defaults()
    return SystemSpec(tuple(limits) or None, mode)


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
    for entity_id, spec in manifest.entities.items():  # the limits a pre-split must allow
        resources |= set(spec.shards)
        levels |= {(entity_id, r) for r in (*spec.shards, DEFAULT_RESOURCE) if spec.shards}
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
#
# A small head item (rev, lock, done, and which chunk sets hold the two JSON documents) plus the
# documents themselves, `managed` and `pending`, cut into chunk items under the same partition.
# Progress writes touch only the head. A head written by an earlier version holds the documents
# as its own `managed` and `pending` attributes; it is still read, and rewritten by the next lock.

CHUNK_CHARS = 60_000  # json.dumps output is ASCII, so characters are bytes: well under 400 KB
PENDING, MANAGED = "PENDING", "MANAGED"


@contextmanager
def dynamo_errors(repo: Repository, what: str) -> Iterator[None]:
    """A DynamoDB failure while planning or applying, as the public error (docs/errors.md)."""
    try:
        yield
    except DynamoError as exc:
        raise public_error(
            f"{what} failed; re-run `zae-limiter limits apply` when DynamoDB answers again "
            "(an interrupted apply resumes where it stopped)",
            exc,
            repo.table_name,
        ) from exc


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


async def _write_chunks(repo: Repository, part: str, text: str) -> tuple[str, int]:
    """Write `text` as a fresh chunk set; returns its (tag, count) for the head to point at."""
    ns = repo.namespace_id
    tag = ulid(repo.scope.clock())
    pieces = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)] or [""]
    items = []
    for index, piece in enumerate(pieces):
        key = keys.manifest_chunk(ns, part, tag, index)
        items.append(
            {**key, **keys.namespace_index_attributes(ns, key["PK"], key["SK"]), "data": piece}
        )
    await repo.scope.store.batch_put(items)
    return tag, len(pieces)


def _document(ns: str, head: dict[str, Any], chunks: dict[str, Any], part: str) -> str | None:
    """One JSON document of the record: from the head (old format) or assembled from chunks."""
    name = part.lower()
    if name in head:
        return str(head[name])
    tag, count = head.get(f"{name}_tag"), int(head.get(f"{name}_n", 0))
    if not tag:
        return None
    pieces = [chunks.get(keys.manifest_chunk(ns, part, str(tag), i)["SK"]) for i in range(count)]
    if any(piece is None for piece in pieces):
        raise ZAELimiterError(
            f"the manifest's record in namespace {ns!r} is missing a {name} chunk; delete the "
            "items of partition " + keys.manifest_partition(ns) + " and apply the manifest again"
        )
    return "".join(str(piece) for piece in pieces)


async def read_ownership(repo: Repository) -> Ownership:
    """The manifest's record for this namespace (an empty Ownership if there is none)."""
    ns = repo.namespace_id
    with dynamo_errors(repo, "reading the manifest's record"):
        items = await repo.scope.store.query_all(
            keys.manifest_partition(ns), sk_prefix=keys.MANIFEST_STATE, consistent=True
        )
    chunks = {str(item["SK"]): item.get("data") for item in items}
    head = next((i for i in items if i["SK"] == keys.MANIFEST_STATE), None)
    if head is None:
        return Ownership()
    managed = json.loads(_document(ns, head, chunks, MANAGED) or "{}")
    pending_json = _document(ns, head, chunks, PENDING) or "[]"
    return Ownership(
        system=bool(managed.get("system")),
        resources=frozenset(managed.get("resources", ())),
        entity_levels=frozenset((e, r) for e, r in managed.get("entity_levels", ())),
        parents=frozenset(managed.get("parents", ())),
        rev=int(head.get("rev", 0)),
        pending=tuple(Change.from_dict(c) for c in json.loads(pending_json)),
        done=int(head.get("done", 0)),
        lock_owner=str(head.get("lock_owner") or ""),
        lock_until_ms=int(head.get("lock_until", 0)),
    )


async def _update_head(
    repo: Repository, expression: str, values: dict[str, Any], lost: str, condition: str = ""
) -> None:
    """A conditional write of the head (by default: only while `:owner` holds the lock)."""
    try:
        await repo.scope.store.update(
            keys.manifest_state(repo.namespace_id),
            expression,
            condition=condition or "lock_owner = :owner",
            values=values,
            return_new=False,
        )
    except ConditionFailed:
        raise ConcurrentApplyError(lost) from None


async def lock(
    repo: Repository,
    base: Ownership,
    *,
    owner: str,
    managed: Ownership,
    pending: tuple[Change, ...],
    now_ms: int,
) -> None:
    """Take the record for one apply: only if nobody changed it since `base` was read.

    The lock is taken first (one head write: a concurrent apply fails here, having written
    nothing), then the owed work and the managed set are written as chunks, then the head is
    pointed at them. Until that last write the head still describes the state before the lock.
    """
    key = keys.manifest_state(repo.namespace_id)
    values: dict[str, Any] = {
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
    with dynamo_errors(repo, "locking the manifest's record"):
        await _update_head(
            repo,
            "SET lock_owner = :owner, lock_until = :until, GSI4PK = :ns, GSI4SK = :g4 ADD rev :one",
            values,
            "another `limits apply` changed this namespace's manifest state since the plan was "
            "made, or is running now; nothing was written. Re-plan (`zae-limiter limits plan`) "
            "and apply again.",
            condition,
        )
        try:
            await _record_plan(repo, owner, managed, pending)
        except BaseException as exc:  # the head still describes the state before the lock
            try:
                await _update_head(
                    repo, "SET lock_until = :zero", {":zero": 0, ":owner": owner}, "lock lost"
                )
            except Exception as release_error:  # the lock then expires on its own
                exc.add_note(f"releasing the lock failed too: {release_error}")
            raise


async def _record_plan(
    repo: Repository, owner: str, managed: Ownership, pending: tuple[Change, ...]
) -> None:
    pending_json = json.dumps([c.as_dict(with_before=False) for c in pending])
    pending_tag, pending_n = await _write_chunks(repo, PENDING, pending_json)
    managed_tag, managed_n = await _write_chunks(repo, MANAGED, _managed_json(managed))
    await _update_head(
        repo,
        "SET pending_tag = :pt, pending_n = :pn, managed_tag = :mt, managed_n = :mn, "
        "done = :zero REMOVE pending, managed",
        {
            ":pt": pending_tag,
            ":pn": pending_n,
            ":mt": managed_tag,
            ":mn": managed_n,
            ":zero": 0,
            ":owner": owner,
        },
        "this apply lost its lock on the manifest state while recording its plan; re-plan "
        "and apply again",
    )


async def progress(
    repo: Repository, *, owner: str, done: int, now_ms: int, release: bool = False
) -> None:
    """Record that the first `done` owed changes are complete, and extend (or release) the lock.

    One write of the small head item (1 WCU).
    """
    with dynamo_errors(repo, "recording the apply's progress"):
        await _update_head(
            repo,
            "SET done = :done, lock_until = :until",
            {":done": done, ":until": 0 if release else now_ms + LOCK_MS, ":owner": owner},
            "this apply lost its lock on the manifest state (it was held too long and another "
            "apply took over); re-plan and apply again",
        )


async def finish(repo: Repository, *, owner: str, managed: Ownership) -> None:
    """Record what the manifest now manages, clear the owed work and release the lock.

    While still holding the lock, the chunks the head no longer points at (this apply's owed
    work, earlier sets, sets left by a crashed apply) are deleted.
    """
    lost = "this apply lost its lock on the manifest state before it finished; re-plan and apply"
    ns = repo.namespace_id
    with dynamo_errors(repo, "recording the finished apply"):
        tag, count = await _write_chunks(repo, MANAGED, _managed_json(managed))
        await _update_head(
            repo,
            "SET managed_tag = :mt, managed_n = :mn ADD rev :one "
            "REMOVE pending_tag, pending_n, done, pending, managed",
            {":mt": tag, ":mn": count, ":one": 1, ":owner": owner},
            lost + " again",
        )
        keep = {keys.manifest_chunk(ns, MANAGED, tag, i)["SK"] for i in range(count)}
        items = await repo.scope.store.query_all(
            keys.manifest_partition(ns), sk_prefix=keys.MANIFEST_STATE + "#", consistent=True
        )
        stale = [keys.key(str(i["PK"]), str(i["SK"])) for i in items if i["SK"] not in keep]
        await repo.scope.store.batch_delete(stale)
        await _update_head(
            repo, "REMOVE lock_owner, lock_until", {":owner": owner}, lost + " again"
        )
