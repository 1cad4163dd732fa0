"""Balance operations: `top_up` and `reset_bucket` (docs/reset-and-top-up.md).

A call validates its arguments before any I/O, passes its feature gate, then reads in one wave
the resolved config with shard 0 of the bucket (restamping it when its stamp is older than the
config, exactly as an acquire's slow path would) and the operation record of its idempotency
key; then the other shards (shard 0 holds the shard count). It writes ONE TransactWriteItems:
every shard, the audit event and the operation record. Each shard write is relative and guarded
(`core.operations`), so it commutes with concurrent hot-path writes; a transaction cancelled by
one of them (or by a restamp) is read and planned again.

The operation record (3-day TTL) stores the arguments and the result: a call with the same key
and the same arguments returns the first result with `replayed=True` and writes nothing; the
same key with other arguments is a `ValidationError`. A transaction whose response is lost is
re-sent by the transport with the same client request token, which DynamoDB applies at most
once; if it still cannot be confirmed the call raises `RateLimiterUnavailable`, and only a key
makes the caller's own retry safe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .. import validation
from ..acquire import RulesChanged
from ..acquire.values import Unavailable, failed_below
from ..core.bucket import MILLI, LimitWrite
from ..core.images import BucketImage
from ..core.times import iso_millis
from ..dynamo import bucket_items as items
from ..dynamo import codec, keys, sequenced
from ..dynamo.transport import AccessDenied, ConditionFailed, DynamoError, TransactionCancelled
from ..errors import (
    EntityNotFoundError,
    PermissionDenied,
    RateLimiterUnavailable,
    ResourceDisabled,
    ValidationError,
)
from ..gathering import gather_or_end
from ..models import AuditAction, BucketOperationResult
from ..scope import Scope
from .balance_call import BalanceCall
from .balance_plans import Bucket, Planned, Shard, full, plan_shard, shares
from .balance_writes import PENDING, BalanceWrites, record_key, shard_request
from .changes import Changes

OPERATION_TTL_SECONDS = 3 * 86400
MAX_ATTEMPTS = 6  # reads and transactions before giving up on a bucket that keeps changing
#: Cancellation reasons that mean "read again and re-plan" (other items' reasons are "None").
_RETRIED_CODES = {None, "None", "ConditionalCheckFailed", "TransactionConflict"}


class Balances:
    """`top_up` and `reset_bucket`, on every shard in one transaction, audited."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock
        self._admission = scope.admission
        self._writes = BalanceWrites(
            self._store, self._ns, self._clock, self._admission.maker, self._audit_item
        )

    async def top_up(
        self,
        entity_id: str,
        resource: str,
        amounts: Mapping[str, int],
        principal: str | None = None,
        idempotency_key: str | None = None,
    ) -> BucketOperationResult:
        """Add whole tokens now, on every shard, in one transaction, audited
        (docs/reset-and-top-up.md).

        A quota gains exactly the amount above its plan until its next reset (a session quota:
        until the live session ends, opening one if none is live). A dripping limit gains at
        most its room below the ceiling; the result says what was granted. A missing bucket is
        created at its full allowance plus the top-up. Pass an `idempotency_key` (an order id)
        so that a retry grants once.
        """
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        checked = validation.amounts(amounts, "amounts", positive=True)
        if not checked:
            raise ValidationError("amounts", amounts, "name at least one limit, e.g. {'weekly': 1}")
        key = None if idempotency_key is None else validation.idempotency_key(idempotency_key)
        await self._changes.gate("top_up")
        call = BalanceCall(
            AuditAction.BUCKET_TOPPED_UP,
            entity_id,
            resource,
            tuple(checked),
            checked,
            key,
            principal,
        )
        return await self._balance_operation(call)

    async def reset_bucket(
        self,
        entity_id: str,
        resource: str,
        limits: Sequence[str] | None = None,
        principal: str | None = None,
        idempotency_key: str | None = None,
    ) -> BucketOperationResult:
        """Restore the named limits (default all) to their full allowance now
        (docs/reset-and-top-up.md).

        Dripping: to the ceiling. Calendar quota: the full allowance plus this period's
        top-ups, this period's spend forgotten, the next edge unchanged. Session quota: the
        session ends, so the next call opens a fresh one. A missing bucket is a no-op
        (`shards=0`).
        """
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        names: tuple[str, ...] | None = None
        if limits is not None:
            if isinstance(limits, str) or not isinstance(limits, Sequence) or not limits:
                raise ValidationError(
                    "limits", limits, "give a list of limit names (['session']) or None for all"
                )
            names = tuple(dict.fromkeys(validation.limit_name(n, "limits") for n in limits))
        key = None if idempotency_key is None else validation.idempotency_key(idempotency_key)
        await self._changes.gate("reset_bucket")
        call = BalanceCall(AuditAction.BUCKET_RESET, entity_id, resource, names, {}, key, principal)
        return await self._balance_operation(call)

    # --- the shared machinery ------------------------------------------------------------------

    async def _balance_operation(self, call: BalanceCall) -> BucketOperationResult:
        for _ in range(MAX_ATTEMPTS):
            try:
                bucket = await self._read_bucket(call)
            except RulesChanged:
                continue
            except (DynamoError, Unavailable) as exc:
                raise self._failure(
                    call, failed_below(exc), "reading the bucket failed; nothing was changed"
                ) from exc
            if bucket.record is not None and bucket.record.get("state") == PENDING:
                return await self._resume(call, bucket)  # stopped half way: finish it
            if bucket.record is not None:
                return call.replay(bucket.record)
            if self._store.sequential:
                try:
                    return await self._one_at_a_time(call, bucket)
                except ConditionFailed:
                    continue  # another call with the same key came first: read again
            shards, gained = self._plan(call, bucket)
            result = BucketOperationResult(
                call.entity_id,
                call.resource,
                len(shards),
                {name: total // MILLI for name, total in gained.items()},
            )
            operations_ = [*shards, await self._audit_for(call, result)]
            if call.idempotency_key is not None:
                operations_.append(self._operation_record(call, result))
            try:
                await self._changes.transact(operations_)
            except TransactionCancelled as exc:
                refused = {r.get("Code") for r in exc.reasons} - _RETRIED_CODES
                if refused:
                    raise self._failure(
                        call,
                        exc,
                        f"DynamoDB refused the write ({sorted(map(str, refused))}); "
                        "nothing was changed",
                    ) from exc
                continue  # a concurrent write, a restamp, or the same key: read again
            except RateLimiterUnavailable as exc:
                raise self._failure(
                    call,
                    exc.cause or exc,
                    "the write was sent but not confirmed; it may or may not have been applied"
                    + (
                        "; retry with the same idempotency_key"
                        if call.idempotency_key
                        else "; without an idempotency_key a retry may apply it twice"
                    ),
                ) from exc
            finally:
                self._changes.forget(call.entity_id, call.resource)
            return result
        raise RateLimiterUnavailable(
            f"{call.verb} kept colliding with concurrent writes to the bucket; nothing was "
            "changed, try again",
            table_name=self._store.table,
            entity_id=call.entity_id,
            resource=call.resource,
        )

    async def _one_at_a_time(self, call: BalanceCall, bucket: Bucket) -> BucketOperationResult:
        """On a table without transactions (`balance_writes`)."""
        planned = self._planned(call, bucket) or ([], [], {})
        token = sequenced.new_token(self._clock())
        try:
            return await self._writes.run(call, planned, self._pending_record(call, token))
        except (DynamoError, Unavailable) as exc:
            if isinstance(exc, ConditionFailed):
                raise
            raise self._failure(
                call,
                failed_below(exc),
                "the write stopped half way; it will be finished by a retry with the same "
                "idempotency_key, or by the sweeper",
            ) from exc
        finally:
            self._changes.forget(call.entity_id, call.resource)

    async def _resume(self, call: BalanceCall, bucket: Bucket) -> BucketOperationResult:
        """Finish an operation whose record is still pending (`balance_writes.resume`)."""
        assert bucket.record is not None and bucket.stamp is not None
        names = call.limits_to_change(bucket.stamp)
        now = self._clock()
        parts = shares(call, bucket.stamp, bucket.shards, names, now)
        try:
            result = await self._writes.resume(call, bucket.shards, parts, bucket.record)
        finally:
            self._changes.forget(call.entity_id, call.resource)
        return replace(result, replayed=True)

    def _pending_record(self, call: BalanceCall, token: str) -> dict[str, Any]:
        """The operation record of an operation written one item at a time, before its writes."""
        key = record_key(self._ns, call, token)
        now = self._clock()
        return {
            **key,
            **keys.namespace_index_attributes(self._ns, key["PK"], key["SK"]),
            "action": call.action,
            "arguments": call.arguments(),
            "state": PENDING,
            "op": token,
            **({"principal": call.principal} if call.principal is not None else {}),
            "created_at": iso_millis(now),
            "ttl": now // 1000 + OPERATION_TTL_SECONDS,
        }

    async def _read_bucket(self, call: BalanceCall) -> Bucket:
        """Config, every live shard (restamped to the config) and the key's operation record."""
        record_key = (
            keys.operation_record(self._ns, call.idempotency_key)
            if call.idempotency_key is not None
            else None
        )
        loaded, record, known = await gather_or_end(
            self._admission.load(call.entity_id, [call.resource], "entity", None),
            self._store.get(record_key) if record_key is not None else _nothing(),
            self._changes.entity_known(call.entity_id),
        )
        now = self._clock()
        if record is not None and int(record.get("ttl", 0)) <= now // 1000:
            record = None  # expired, not yet deleted by DynamoDB
        _, target = loaded[call.resource]
        if not known and (target is None or not target.exists):
            raise EntityNotFoundError(call.entity_id)  # a mistyped id must never buy credit
        if target is None:
            return Bucket(None, [], record)
        if not target.exists:
            return Bucket(target.stamp, [], record)
        if target.stamp.shards == 1:
            return Bucket(target.stamp, [Shard(target.image, exists=True)], record)
        # Sharded: the acquire machinery may have picked any shard; read them all, at one instant.
        count = target.stamp.shards
        found = await self._store.batch_get(
            [keys.bucket(self._ns, call.entity_id, call.resource, s) for s in range(count)],
            consistent=True,
        )
        by_shard = {image.shard: image for image in map(items.parse, found)}
        now = self._clock()
        first = by_shard.get(0)
        if first is None or first.expired(now) or first.stamp.shards != count:
            raise RulesChanged()  # changed since the first read: start again
        stamp = first.stamp  # shard 0 holds the shard count; its stamp is the bucket's
        shards = [Shard(first, exists=True)]
        for shard in range(1, count):
            image = by_shard.get(shard)
            if image is None or image.expired(now):  # never written, or expired: full
                seq = image.stamp_seq + 1 if image is not None else 1
                blank = BucketImage(
                    self._ns, call.entity_id, call.resource, shard, stamp, seq, full(stamp, shard)
                )
                shards.append(Shard(blank, exists=False))
                continue
            if image.stamp != stamp:
                image = await self._admission.restamp(image, stamp)
            shards.append(Shard(image, exists=True))
        return Bucket(stamp, shards, record)

    def _plan(
        self, call: BalanceCall, bucket: Bucket
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """The shard writes (transaction operations) and the gain per limit (milli)."""
        planned = self._planned(call, bucket)
        if planned is None:
            return [], dict.fromkeys(call.limits_to_change(bucket.stamp), 0)
        shards, plans, gained = planned
        now = self._clock()
        # Every shard's re-arm count goes up by one (docs/alerts.md); a shard created here starts
        # where the others arrive, so that the shards keep agreeing on it.
        rearmed = max((shard.image.rearms for shard in shards), default=0) + 1
        requests = [
            _transact_update(self._shard_request(shard, writes, now, rearmed))
            for shard, (writes, _) in zip(shards, plans, strict=True)
        ]
        return requests, gained

    def _planned(self, call: BalanceCall, bucket: Bucket) -> Planned | None:
        """Every shard to write, its writes and gains, and the gains summed (milli per limit);
        None when nothing is to be written (unmetered, or a reset of a missing bucket)."""
        stamp = bucket.stamp
        declared = stamp.names if stamp is not None else ()
        unknown = [name for name in call.names or () if name not in declared]
        if unknown and not declared:  # the resource is what is wrong, not the limit name
            raise ValidationError(
                "resource",
                call.resource,
                f"resource {call.resource!r} has no limits for {call.entity_id!r} (none on the "
                "entity, in its defaults or on the resource): check the name with "
                "`zae-limiter resource list`, or set its limits first (`zae-limiter resource "
                "set-defaults`)",
            )
        if unknown:
            raise ValidationError(
                "limit name",
                unknown[0],
                f"resource {call.resource!r} declares {list(declared)} for {call.entity_id!r}; "
                f"{call.verb} only those",
            )
        names = call.limits_to_change(stamp)
        if stamp is None or (not bucket.shards and not call.is_top_up):
            return None
        shards = bucket.shards
        if not shards:  # a top-up creates the bucket, as acquire would
            if stamp.is_disabled:
                raise ResourceDisabled(call.entity_id, call.resource, stamp.flag_level)
            blank = BucketImage(
                self._ns, call.entity_id, call.resource, 0, stamp, 1, full(stamp, 0)
            )
            shards = [Shard(blank, exists=False)]
        if not call.is_top_up:
            shards = [shard for shard in shards if shard.exists]
        now = self._clock()
        plans = [
            plan_shard(call, stamp, shard.image, share, now)
            for shard, share in zip(shards, shares(call, stamp, shards, names, now), strict=True)
        ]
        gained = dict.fromkeys(names, 0)
        for _, gains in plans:
            for name, gain in gains.items():
                gained[name] += gain
        return shards, plans, gained

    def _shard_request(
        self, shard: Shard, writes: dict[str, LimitWrite], now: int, rearmed: int
    ) -> dict[str, Any]:
        return shard_request(self._store.table, self._admission.maker, shard, writes, now, rearmed)

    async def _audit_for(self, call: BalanceCall, result: BucketOperationResult) -> dict[str, Any]:
        return {"Put": {"Item": await self._audit_item(call, result)}}

    async def _audit_item(self, call: BalanceCall, result: BucketOperationResult) -> dict[str, Any]:
        details: dict[str, Any] = {
            "limits": list(result.amounts),
            "amounts": result.amounts,
            "shards": result.shards,
            "idempotency_key": call.idempotency_key,
        }
        if call.is_top_up:
            details["requested"] = call.amounts
        return await self._changes.audit_item(
            call.action,
            call.entity_id,
            principal=call.principal,
            resource=call.resource,
            details=details,
        )

    def _operation_record(self, call: BalanceCall, result: BucketOperationResult) -> dict[str, Any]:
        assert call.idempotency_key is not None
        key = keys.operation_record(self._ns, call.idempotency_key)
        now = self._clock()
        item = {
            **key,
            **keys.namespace_index_attributes(self._ns, key["PK"], key["SK"]),
            "action": call.action,
            "arguments": call.arguments(),
            "result": json.dumps({"shards": result.shards, "amounts": result.amounts}),
            "created_at": iso_millis(now),
            "ttl": now // 1000 + OPERATION_TTL_SECONDS,
        }
        return {
            "Put": {
                "Item": item,
                "ConditionExpression": "attribute_not_exists(PK) OR #ttl <= :now",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now": now // 1000},
            }
        }

    def _failure(
        self, call: BalanceCall, cause: BaseException, message: str
    ) -> RateLimiterUnavailable:
        if isinstance(cause, AccessDenied):
            return PermissionDenied(
                f"DynamoDB refused dynamodb:{cause.operation}; {call.verb} needs the "
                "zae-limiter 'admin' managed policy",
                cause,
                table_name=self._store.table,
                entity_id=call.entity_id,
                resource=call.resource,
            )
        return RateLimiterUnavailable(
            f"{call.verb}: {message}",
            cause,
            table_name=self._store.table,
            entity_id=call.entity_id,
            resource=call.resource,
        )


# --- helpers -----------------------------------------------------------------------------------


async def _nothing() -> None:
    return None


def _transact_update(request: dict[str, Any]) -> dict[str, Any]:
    """A prepared UpdateItem (wire form) as a TransactWriteItems operation (plain form)."""
    dropped = ("TableName", "ReturnValues", "ReturnValuesOnConditionCheckFailure")
    body = {k: v for k, v in request.items() if k not in dropped}
    body["Key"] = codec.decode_item(body["Key"])
    body["ExpressionAttributeValues"] = {
        name: codec.decode(value) for name, value in body["ExpressionAttributeValues"].items()
    }
    return {"Update": body}
