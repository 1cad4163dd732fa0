"""The aggregator's snapshot writes on a table without transactions (docs/multi-region.md).

Elsewhere a chunk of stream records is one transaction with a marker per record
(`aggregator`). On a table with multi-Region strong consistency, each snapshot is written on its
own, exactly once for every record:

1. records whose marker exists were applied by an earlier delivery: dropped;
2. records of writes made before their entity was deleted (its usage tombstone) are dropped;
3. each snapshot gets one update adding the records' summed counts and an entry per record
   (`@<eventID>`), applied only where none of those entries is: a snapshot that already holds
   some (an earlier delivery stopped half way) is sent again without them;
4. a tombstone that appeared meanwhile (a delete racing the batch) is honoured by taking back
   exactly what this batch added for writes before it (only while its entries are there);
5. the markers are written, then the entries removed from the snapshots.

A delivery stopped between 3 and 5 is redelivered: its entries on the snapshots say what was
applied. Entries that outlive a stopped delivery whose record is never redelivered are removed
by the sweeper once the record's marker exists.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..dynamo import codec, keys
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed, UnknownOutcome
from ..gathering import gather_or_end
from . import snapshot_items
from .records import BucketChange
from .snapshot_items import Counts, SnapshotKey

ENTRY_PREFIX = "@"
PER_WRITE = 50  # records' entries on one snapshot update at most (expressions stay under 4 KB)
RESENDS = 3


class RecordToApply(Protocol):
    """A stream record to apply (`aggregator._Pending`)."""

    @property
    def event_id(self) -> str: ...

    @property
    def change(self) -> BucketChange: ...

    @property
    def snapshots(self) -> dict[SnapshotKey, Counts]: ...


P = TypeVar("P", bound=RecordToApply)


class SnapshotWrites:
    """Applies chunks of records to snapshots one item at a time (the module docstring)."""

    def __init__(
        self, store: Store, clock: Callable[[], int], ttl_of: Callable[[SnapshotKey], int]
    ) -> None:
        self._store, self._clock, self._ttl_of = store, clock, ttl_of

    async def apply(self, chunk: Sequence[P], marker_ttl_s: int) -> tuple[list[P], int, int]:
        """Apply the chunk: (the records this call applied, duplicates, ignored)."""
        markers = await self._store.batch_get(
            [keys.aggregation_marker(p.event_id) for p in chunk], consistent=True
        )
        done = {str(item["PK"]) for item in markers}
        fresh = [p for p in chunk if keys.aggregation_marker(p.event_id)["PK"] not in done]
        deleted = await self._tombstones(fresh)
        kept = [p for p in fresh if not _before_deletion(p, deleted)]
        by_snapshot: dict[SnapshotKey, list[RecordToApply]] = {}
        for p in kept:
            for key in p.snapshots:
                by_snapshot.setdefault(key, []).append(p)
        written = await gather_or_end(*(self._add(k, ps) for k, ps in by_snapshot.items()))
        touched = {key: ids for key, ids in zip(by_snapshot, written, strict=True) if ids}
        late = await self._tombstones(kept)
        for key, ids in touched.items():
            cut = late.get((key.ns, key.entity_id))
            back = [p for p in by_snapshot[key] if cut is not None and p.change.event_ms <= cut]
            if back:
                await self._take_back(key, [p for p in back if p.event_id in ids])
        await self._store.batch_put(
            [
                {**keys.aggregation_marker(p.event_id), "ttl": marker_ttl_s}
                for p in fresh
                if not _before_deletion(p, deleted)
            ]
        )
        await gather_or_end(*(self._forget(key, ids) for key, ids in touched.items()))
        ignored = len(fresh) - len(kept)
        return kept, len(chunk) - len(fresh), ignored

    async def _tombstones(self, chunk: Sequence[RecordToApply]) -> dict[tuple[str, str], int]:
        entities = sorted({(p.change.ns, p.change.entity_id) for p in chunk})
        found = await gather_or_end(
            *(self._store.get(keys.usage_tombstone(*e), consistent=True) for e in entities)
        )
        return {e: int(t["deleted_ms"]) for e, t in zip(entities, found, strict=True) if t}

    async def _add(self, key: SnapshotKey, pending: list[RecordToApply]) -> set[str]:
        """Add the records' counts to one snapshot, each once; the event ids now on it (added
        by this call, or by an earlier delivery that stopped before its markers)."""
        on_it: set[str] = set()
        for start in range(0, len(pending), PER_WRITE):
            on_it |= await self._add_part(key, pending[start : start + PER_WRITE])
        return on_it

    async def _add_part(self, key: SnapshotKey, pending: list[RecordToApply]) -> set[str]:
        held: set[str] = set()
        while pending:
            counts = Counts()
            for p in pending:
                counts.add(p.snapshots[key])
            if counts.empty:
                return held  # e.g. a debit and its refund: nothing to add
            request = _update(
                self._store.table, key, counts, self._ttl_of(key), pending, self._clock()
            )
            try:
                await self._send(request)
                return held | {p.event_id for p in pending}
            except ConditionFailed as failed:
                item = failed.item or {}
                held |= {p.event_id for p in pending if ENTRY_PREFIX + p.event_id in item}
                pending = [p for p in pending if p.event_id not in held]
        return held

    async def _take_back(self, key: SnapshotKey, pending: list[RecordToApply]) -> None:
        """Undo what this call added for records of writes before a delete that raced it (only
        while their entries are there: the delete may have removed the snapshot since)."""
        counts = Counts()
        for p in pending:
            counts.add(_negated(p.snapshots[key]))
        added = snapshot_items.added_counters(counts)
        names = {f"#d{i}": name for i, name in enumerate(added)}
        values = {f":d{i}": codec.encode(n) for i, n in enumerate(added.values())}
        entries = {f"#a{i}": ENTRY_PREFIX + p.event_id for i, p in enumerate(pending)}
        request = {
            "TableName": self._store.table,
            "Key": codec.encode_item(key.item_key),
            "UpdateExpression": "ADD "
            + ", ".join(f"#d{i} :d{i}" for i in range(len(added)))
            + " REMOVE "
            + ", ".join(entries),
            "ConditionExpression": " AND ".join(f"attribute_exists({n})" for n in entries),
            "ExpressionAttributeNames": {**names, **entries},
            "ExpressionAttributeValues": values,
        }
        with contextlib.suppress(ConditionFailed):  # the delete removed it after this call
            await self._send(request)

    async def _forget(self, key: SnapshotKey, event_ids: set[str]) -> None:
        """Remove the records' entries (their markers exist now)."""
        names = {f"#e{i}": ENTRY_PREFIX + e for i, e in enumerate(sorted(event_ids))}
        request = {
            "TableName": self._store.table,
            "Key": codec.encode_item(key.item_key),
            "UpdateExpression": "REMOVE " + ", ".join(names),
            "ConditionExpression": "attribute_exists(PK)",
            "ExpressionAttributeNames": names,
        }
        with contextlib.suppress(ConditionFailed):  # deleted meanwhile (its entity was)
            await self._send(request)

    async def _send(self, request: dict[str, Any]) -> None:
        for attempt in range(RESENDS + 1):
            try:
                await self._store.transport.call("UpdateItem", request, write=True)
                return
            except UnknownOutcome:
                if attempt == RESENDS:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))  # the entries make a re-send safe


def _before_deletion(p: RecordToApply, deleted: dict[tuple[str, str], int]) -> bool:
    cut = deleted.get((p.change.ns, p.change.entity_id))
    return cut is not None and p.change.event_ms <= cut


def _negated(counts: Counts) -> Counts:
    return Counts(
        consumed={n: -v for n, v in counts.consumed.items()},
        overdrawn={n: -v for n, v in counts.overdrawn.items()},
        events=-counts.events,
        cascaded={n: -v for n, v in counts.cascaded.items()},
    )


def _update(
    table: str,
    key: SnapshotKey,
    counts: Counts,
    ttl_s: int,
    pending: Sequence[RecordToApply],
    now_ms: int,
) -> dict[str, Any]:
    """The snapshot's UpdateItem (wire form): the counts added, one entry per record, applied
    only where none of the entries is."""
    body = snapshot_items.update_operation(key, counts, ttl_s)["Update"]
    names, values = dict(body["ExpressionAttributeNames"]), dict(body["ExpressionAttributeValues"])
    entries = []
    for i, p in enumerate(pending):
        names[f"#a{i}"] = ENTRY_PREFIX + p.event_id
        entries.append(f"#a{i}")
    values[":at"] = now_ms
    sets = ", ".join(f"{name} = :at" for name in entries)
    expression = str(body["UpdateExpression"]).replace("SET ", f"SET {sets}, ", 1)
    return {
        "TableName": table,
        "Key": codec.encode_item(body["Key"]),
        "UpdateExpression": expression,
        "ConditionExpression": " AND ".join(f"attribute_not_exists({n})" for n in entries),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": {k: codec.encode(v) for k, v in values.items()},
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
