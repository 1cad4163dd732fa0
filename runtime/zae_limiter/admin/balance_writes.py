"""`top_up` and `reset_bucket` on a table without transactions (docs/multi-region.md).

Elsewhere a balance operation is one transaction (`balances`). On a table with multi-Region
strong consistency it is written one item at a time, with the same meaning:

1. **The decision**: the operation record (the idempotency key's, or a hidden one keyed by the
   operation's token), written `pending` only if no live record has the key; a journal entry
   points the sweeper at it.
2. **Every shard**, each once: its write carries the operation's mark (`^<token>`: when, and
   what it gained) and applies only where the mark is absent, so a re-send after a lost answer,
   or a second process finishing the operation, never applies twice. A shard whose guards fail
   (a concurrent write) is read and planned again, on its own.
3. **The audit event**, then the record `done` with the result, then the journal entry goes.

A call that stops half way leaves the record `pending`: a retry with the same key, or the
sweeper for any, finishes it (`resume`): shards carrying the mark are counted as done (their
gains read from it), the others written. Marks older than `MARK_KEPT_MS` are removed by the
next balance write on the shard.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..acquire.planning import ItemMaker
from ..core.bucket import MILLI, LimitWrite
from ..dynamo import bucket_attributes as attrs
from ..dynamo import bucket_items as items
from ..dynamo import codec, keys, sequenced
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed, UnknownOutcome
from ..errors import RateLimiterUnavailable
from ..models import BucketOperationResult
from .balance_call import BalanceCall
from .balance_plans import Planned, Shard, plan_shard, shares

MARK_PREFIX = "^"
MARK_KEPT_MS = 86_400_000  # a mark outlives every re-send and resumption by far
MARKS_PRUNED = 4  # per write, at most
ATTEMPTS = 6  # plans of one shard before the operation is left to be finished later
RESENDS = 3
PENDING, DONE = "pending", "done"
JOURNAL_KIND = "balance"

AuditItem = Callable[[BalanceCall, BucketOperationResult], Awaitable[dict[str, Any]]]


def record_key(ns: str, call: BalanceCall, token: str) -> dict[str, str]:
    """The operation record: the idempotency key's, else one only this operation knows."""
    return keys.operation_record(ns, call.idempotency_key or f"~{token}")


class BalanceWrites:
    """One balance operation, one item at a time (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        ns: str,
        clock: Callable[[], int],
        maker: ItemMaker,
        audit_item: AuditItem,
    ) -> None:
        self._store, self._ns, self._clock = store, ns, clock
        self._maker = maker
        self._audit_item = audit_item

    async def run(
        self, call: BalanceCall, planned: Planned, record: dict[str, Any]
    ) -> BucketOperationResult:
        """Write a planned operation whose `record` (pending, with its token) is the decision.
        Raises `ConditionFailed` when a live record of the same key stands in the way."""
        token = str(record["op"])
        await self._store.put(
            record,
            condition="attribute_not_exists(PK) OR #ttl <= :now",
            names={"#ttl": "ttl"},
            values={":now": self._clock() // 1000},
        )
        journal = {"PK": sequenced.JOURNAL_PK, "SK": token, "kind": JOURNAL_KIND}
        await self._store.put({**journal, "ns": self._ns, "record": record["PK"]})
        shards, plans, _ = planned
        return await self._finish(call, shards, [share for _, share in plans], token, record)

    async def resume(
        self,
        call: BalanceCall,
        shards: list[Shard],
        shares: list[dict[str, int]],
        record: dict[str, Any],
    ) -> BucketOperationResult:
        """Finish a pending operation (its record as read, the shards as they are now)."""
        return await self._finish(call, shards, shares, str(record["op"]), record)

    async def _finish(
        self,
        call: BalanceCall,
        shards: list[Shard],
        shares: list[dict[str, int]],
        token: str,
        record: dict[str, Any],
    ) -> BucketOperationResult:
        rearmed = max((shard.image.rearms for shard in shards), default=0) + 1
        gained: dict[str, int] = {}
        for shard, share in zip(shards, shares, strict=True):
            for name, gain in (await self._shard(call, shard, share, token, rearmed)).items():
                gained[name] = gained.get(name, 0) + gain
        names = call.limits_to_change(shards[0].image.stamp) if shards else ()
        result = BucketOperationResult(
            call.entity_id,
            call.resource,
            len(shards),
            {name: gained.get(name, 0) // MILLI for name in names},
        )
        await self._store.put(await self._audit_item(call, result))
        await self._store.update(
            {"PK": record["PK"], "SK": record["SK"]},
            "SET #state = :done, #result = :result",
            names={"#state": "state", "#result": "result"},
            values={
                ":done": DONE,
                ":result": json.dumps({"shards": result.shards, "amounts": result.amounts}),
            },
            return_new=False,
        )
        await self._store.delete({"PK": sequenced.JOURNAL_PK, "SK": token})
        return result

    async def _shard(
        self, call: BalanceCall, shard: Shard, share: dict[str, int], token: str, rearmed: int
    ) -> dict[str, int]:
        """Write one shard once; its gains (milli per limit)."""
        mark = MARK_PREFIX + token
        for _ in range(ATTEMPTS):
            now = self._clock()
            writes, gains = plan_shard(call, shard.image.stamp, shard.image, share, now)
            if not writes:
                return gains
            request = shard_request(self._store.table, self._maker, shard, writes, now, rearmed)
            _with_mark(request, mark, {"t": now, "g": gains})
            try:
                await self._send(request)
                return gains
            except ConditionFailed as failed:
                if failed.item is not None and mark in failed.item:
                    return _gains(failed.item[mark])  # landed before (a lost answer)
                shard = _shard_of(failed.item, shard)
        raise RateLimiterUnavailable(
            f"{call.verb} kept colliding with concurrent writes to shard {shard.image.shard}; "
            "it will be finished by a retry with the same idempotency_key, or by the sweeper",
            table_name=self._store.table,
            entity_id=call.entity_id,
            resource=call.resource,
        )

    async def _send(self, request: dict[str, Any]) -> None:
        for attempt in range(RESENDS + 1):
            try:
                await self._store.send_update(request)
                return
            except UnknownOutcome:
                if attempt == RESENDS:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))  # the mark makes a re-send safe


def shard_request(
    table: str,
    maker: ItemMaker,
    shard: Shard,
    writes: dict[str, LimitWrite],
    now: int,
    rearmed: int,
) -> dict[str, Any]:
    """One shard's UpdateItem: a guarded update, or the creation of the item; either re-arms the
    alert thresholds of the item (`attrs.REARMS`, docs/alerts.md)."""
    image = shard.image
    states = {**image.states, **{name: w.result for name, w in writes.items()}}
    ttl = maker.ttl(image.stamp, states, now)
    if shard.exists:
        request = items.update_request(table, image, writes, now=now, ttl=ttl, admissions=0)
        # ADD, not SET: concurrent top-ups each count, whatever they read
        request["UpdateExpression"] += " ADD #rearm :one"
        request["ExpressionAttributeNames"]["#rearm"] = attrs.REARMS
        request["ExpressionAttributeValues"][":one"] = {"N": "1"}
        return request
    new = maker.image_for(image, image.stamp, image.stamp_seq, states, now)
    item = items.item_of(new)
    item[attrs.REARMS] = rearmed
    return items.put_request(table, item, replaces=None, expired_before_s=now // 1000)


async def finish_pending(
    store: Store,
    ns: str,
    record: dict[str, Any],
    clock: Callable[[], int],
    maker: ItemMaker,
    audit_item: AuditItem,
) -> BucketOperationResult | None:
    """Finish a pending operation from its record alone (the sweeper): the bucket's shards as
    stored, planned on their own stamps. None when the bucket is gone."""
    key = str(record["PK"]).split("#OP#", 1)[1]
    call = BalanceCall.from_record(record, None if key.startswith("~") else key)
    addresses = [keys.bucket(ns, call.entity_id, call.resource, 0)]
    first = await store.batch_get(addresses, consistent=True)
    if not first:
        return None
    stamp = items.parse(first[0]).stamp
    found = await store.batch_get(
        [keys.bucket(ns, call.entity_id, call.resource, s) for s in range(stamp.shards)],
        consistent=True,
    )
    shards = [Shard(items.parse(item), exists=True) for item in found]
    shards.sort(key=lambda shard: shard.image.shard)
    parts = shares(call, stamp, shards, call.limits_to_change(stamp), clock())
    writes = BalanceWrites(store, ns, clock, maker, audit_item)
    return await writes.resume(call, shards, parts, record)


def marks_of(item: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The balance operations' marks on a bucket item (plain form): token -> mark."""
    if item is None:
        return {}
    return {k[len(MARK_PREFIX) :]: v for k, v in item.items() if k.startswith(MARK_PREFIX)}


def _gains(mark: Any) -> dict[str, int]:
    return {str(name): int(gain) for name, gain in (mark or {}).get("g", {}).items()}


def _shard_of(item: dict[str, Any] | None, before: Shard) -> Shard:
    """The shard as a failed write found it (absent: to be created, full)."""
    if item is None:
        return Shard(before.image, exists=False)
    return Shard(items.parse(item), exists=True)


def _with_mark(request: dict[str, Any], mark: str, value: dict[str, Any]) -> None:
    """The request also sets the operation's mark, and applies only where it is absent."""
    names, values = request["ExpressionAttributeNames"], request["ExpressionAttributeValues"]
    names["#opm"], values[":opm"] = mark, codec.encode(value)
    request["UpdateExpression"] = request["UpdateExpression"].replace(
        "SET ", "SET #opm = :opm, ", 1
    )
    condition = sequenced.conjunct(request["ConditionExpression"])
    request["ConditionExpression"] = f"{condition} AND attribute_not_exists(#opm)"
