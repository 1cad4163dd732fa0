"""Pre-splitting: `set_shards`, for a bucket an operator knows will be hot (docs/sharding.md)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from .. import validation
from ..acquire.shards import MAX_SHARDS
from ..acquire.values import ItemChanged, RulesChanged, Unavailable, failed_below
from ..core.images import Stamp
from ..core.shard_split import too_small_to_double
from ..core.shares import MILLI
from ..dynamo.transport import DynamoError
from ..errors import RateLimiterUnavailable, ValidationError
from ..models import AuditAction
from ..scope import Scope
from .changes import Changes

SHARD_COUNTS = tuple(2**i for i in range(MAX_SHARDS.bit_length()))  # 1, 2, 4, ... 32
MAX_ATTEMPTS = 6


class Shards:
    """`set_shards`: pre-splitting a bucket."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._admission = scope.store, scope.admission

    async def set_shards(
        self, entity_id: str, resource: str, count: int, principal: str | None = None
    ) -> int:
        """Split the entity's bucket for `resource` into at least `count` shards now (1, 2, 4,
        8, 16 or 32), creating it at its full allowance if it does not exist. Never lowers the
        count. Each doubling is one transaction; the last carries the audit event
        (`bucket_sharded`). Returns the bucket's shard count.
        """
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        if isinstance(count, bool) or not isinstance(count, int) or count not in SHARD_COUNTS:
            raise ValidationError(
                "count", count, f"must be one of {', '.join(map(str, SHARD_COUNTS))}"
            )
        try:
            stamp = await self._bucket_stamp(entity_id, resource, count)
            shards = before = stamp.shards
            for _ in range(MAX_ATTEMPTS * len(SHARD_COUNTS)):
                if shards >= count:
                    return shards
                _refuse_below_one_unit(stamp, shards, count)
                last = shards * 2 >= count
                doubled = await self._admission.split(
                    entity_id,
                    resource,
                    shards,
                    self._sharded_event(entity_id, resource, before, principal) if last else None,
                )
                if doubled == shards:
                    stamp = await self._bucket_stamp(entity_id, resource, count)
                    doubled = stamp.shards
                shards = doubled
        except (DynamoError, Unavailable) as failure:
            exc = failed_below(failure)
            raise RateLimiterUnavailable(
                f"set_shards: DynamoDB failed ({exc}); the bucket keeps the shards it has, "
                "run it again",
                exc,
                table_name=self._store.table,
                entity_id=entity_id,
                resource=resource,
            ) from exc
        finally:
            self._changes.forget(entity_id, resource)
        raise RateLimiterUnavailable(
            "set_shards kept colliding with concurrent writes to the bucket; run it again",
            table_name=self._store.table,
            entity_id=entity_id,
            resource=resource,
        )

    async def _bucket_stamp(self, entity_id: str, resource: str, count: int) -> Stamp:
        """The bucket's stamp (its limits, its shard count), creating the bucket (one shard,
        full) if it is absent; a ValidationError before any write when its limits cannot be
        split into `count` shards."""
        for _ in range(MAX_ATTEMPTS):
            try:
                loaded = await self._admission.load(entity_id, [resource], "entity", None)
            except RulesChanged:
                continue
            _, target = loaded[resource]
            if target is None:
                raise ValidationError(
                    "resource",
                    resource,
                    f"has no limits for {entity_id!r} (unmetered): there is no bucket to split",
                )
            _refuse_below_one_unit_up_to(target.stamp, count)
            if target.exists:
                return target.stamp
            try:
                await self._admission.create(target)
            except (ItemChanged, Unavailable):
                continue  # created concurrently: read it again
        raise RateLimiterUnavailable(
            "set_shards could not read a stable bucket; run it again",
            table_name=self._store.table,
            entity_id=entity_id,
            resource=resource,
        )

    def _sharded_event(
        self, entity_id: str, resource: str, before: int, principal: str | None
    ) -> Callable[[int], Coroutine[Any, Any, list[dict[str, Any]]]]:
        """The audit event, for the transaction of the doubling that reaches the count."""

        async def event(doubled: int) -> list[dict[str, Any]]:
            item = await self._changes.audit_item(
                AuditAction.BUCKET_SHARDED,
                entity_id,
                principal=principal,
                resource=resource,
                details={"shards": doubled, "previous_shards": before},
            )
            return [{"Put": {"Item": item}}]

        return event


def _refuse_below_one_unit_up_to(stamp: Stamp, count: int) -> None:
    """`_refuse_below_one_unit` for every doubling from the stamp's shard count to `count`, so
    that nothing is split (or created) when the last doubling would be refused."""
    shards = stamp.shards
    while shards < count:
        _refuse_below_one_unit(stamp, shards, count)
        shards *= 2


def _refuse_below_one_unit(stamp: Stamp, shards: int, count: int) -> None:
    """A ValidationError when doubling `shards` would give a concurrency limit a shard share
    below one unit (spec §5.19), naming the most shards it allows and the fix."""
    small = too_small_to_double(stamp.limits, shards)
    if small is None:
        return
    units = small.capacity // MILLI
    raise ValidationError(
        "count",
        count,
        f"splits concurrency limit {small.name!r} (max_in_flight={units}) below one unit per "
        f"shard: ask for at most {shards} shards, or raise its max_in_flight to at least {count}",
    )
