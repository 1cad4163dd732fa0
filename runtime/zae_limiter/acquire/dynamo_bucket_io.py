"""The acquire path's one door to DynamoDB: `BucketIO` on a table, and failures mapped once.

`DynamoBucketIO` implements `bucket_io.BucketIO`: each method is one request (a split is one
transaction), built and parsed by `zae_limiter.dynamo.bucket_items`. Conditions follow it: a
debit is guarded by the item's stamp sequence and its limits' guards, a create by the item's
absence, a replace by the item being exactly the image it replaces.

`lowered` maps what DynamoDB and the transport raise into the acquire path's errors, here and
only here: a failed condition becomes `ItemChanged` carrying the stored item as an image, a lost
answer `AnswerLost`, any other failure `Unavailable` (naming the operation AWS refused, if so).
No other module of `acquire/` imports `zae_limiter.dynamo`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.bucket import LimitWrite
from ..core.images import Address, BucketImage, Evidence
from ..dynamo import bucket_items as items
from ..dynamo import bucket_wire, codec, keys
from ..dynamo.failures import throttled
from ..dynamo.store import Store
from ..dynamo.transport import (
    AccessDenied,
    ConditionFailed,
    TransactionCancelled,
    UnknownOutcome,
)
from ..dynamo.transport import (
    DynamoError as DynamoError,  # re-exported: acquire modules catch it only through here
)
from .bucket_io import ShardSplit
from .values import AnswerLost, ItemChanged, Unavailable


def lowering(failure: DynamoError) -> Exception:
    """The acquire path's error for a failure of DynamoDB or the transport."""
    if isinstance(failure, ConditionFailed):
        return ItemChanged(None if failure.item is None else items.parse(failure.item))
    if isinstance(failure, TransactionCancelled):
        return ItemChanged(None)
    if isinstance(failure, UnknownOutcome):
        return AnswerLost(failure.cause)
    if isinstance(failure, AccessDenied):
        return Unavailable(failure, denied=failure.operation)
    return Unavailable(failure, throttled=throttled(failure))


class _Lowered:
    """`with lowered:` raises a `DynamoError` from inside as `lowering(error)` (a plain class,
    not a generator: it wraps every write of the warm path)."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        if isinstance(error, DynamoError):
            raise lowering(error) from error


lowered = _Lowered()


class DynamoBucketIO:
    """Bucket reads and writes on one table, over `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, addresses: Sequence[Address]) -> list[BucketImage]:
        """Every stored item among `addresses` (strongly consistent), in any order."""
        with lowered:
            found = await self.store.batch_get(
                [keys.bucket(*address) for address in addresses], consistent=True
            )
        return [items.parse(item) for item in found]

    async def update(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        *,
        now: int,
        ttl: int | None,
        admissions: int,
        evidence: Evidence | None,
    ) -> BucketImage:
        """Apply `writes` to the stored item if it still carries `image`'s stamp sequence and
        every write's guards hold (and, with `evidence`, its writer's entry is below it)."""
        request = items.update_request(
            self.store.table,
            image,
            dict(writes),
            now=now,
            ttl=ttl,
            admissions=admissions,
            evidence=evidence,
        )
        try:  # not `with lowered:`, whose two calls the warm path would pay
            wire = await self.store.send_update(request)
        except DynamoError as error:
            raise lowering(error) from error
        return bucket_wire.parse_updated(wire, image)

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        """Move the writer's entry past `blocked` unless that write landed (one small write)."""
        key = keys.bucket(*image.address)
        return await self._send(items.fence_request(self.store.table, key, evidence, blocked))

    async def create(self, new: BucketImage, *, expired_before_s: int) -> BucketImage:
        """Write `new` if no item is stored at its address (or the stored one expired)."""
        item = items.item_of(new)
        return await self._send(
            items.put_request(
                self.store.table, item, replaces=None, expired_before_s=expired_before_s
            )
        )

    async def replace(self, new: BucketImage, *, replaces: BucketImage) -> BucketImage:
        """Write `new` over the stored item if that is still exactly `replaces`."""
        item = items.item_of(new)
        return await self._send(
            items.put_request(self.store.table, item, replaces=replaces, expired_before_s=None)
        )

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Double a bucket's shards: every part (and `extra`) in one transaction, all or
        nothing."""
        operations = [op for part in parts for op in self._split_operations(part)]
        with lowered:
            await self.store.transact([*operations, *extra], token=token)

    async def _send(self, request: dict[str, Any]) -> BucketImage:
        with lowered:
            wire = await self.store.send_update(request)
        return bucket_wire.parse_wire(wire)

    def _split_operations(self, part: ShardSplit) -> list[dict[str, Any]]:
        sibling_op = {
            "Put": {
                "Item": items.item_of(part.sibling),
                "ConditionExpression": "attribute_not_exists(PK) OR #ttl < :now",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now": part.now // 1000},
            }
        }
        if not part.exists:
            assert part.old_new is not None
            item = items.item_of(part.old_new)
            create = {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}
            return [{"Put": create}, sibling_op]
        request = items.update_request(
            self.store.table,
            part.old,
            dict(part.old_writes),
            now=part.now,
            ttl=None,
            admissions=0,
            new_shards=part.old.stamp.shards * 2,
        )
        key = keys.bucket(*part.old.address)
        update = {
            "Key": {"PK": key["PK"], "SK": key["SK"]},
            "UpdateExpression": request["UpdateExpression"],
            "ConditionExpression": request["ConditionExpression"],
            "ExpressionAttributeNames": request["ExpressionAttributeNames"],
            "ExpressionAttributeValues": {
                k: codec.decode(v) for k, v in request["ExpressionAttributeValues"].items()
            },
        }
        return [{"Update": update}, sibling_op]
