"""The bucket operations of the acquire path, sent as DynamoDB requests.

`DynamoBucketStore` is the DynamoDB implementation of `zae_limiter.acquire.store.BucketStore`:
each method is one request (a split is one transaction). Conditions follow `bucket_items`: a
debit is guarded by the item's stamp sequence and its limits' guards, a create by the item's
absence, a replace by the item being exactly the image it replaces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from ..core.bucket import LimitWrite
from . import bucket_items as items
from . import bucket_wire, codec
from .bucket_items import BucketImage
from .store import Store


@dataclass(frozen=True)
class ShardSplit:
    """One old shard of a bucket whose shard count doubles, and its new sibling.

    An existing old shard gets `old_writes` (its share moves to the sibling) and the new shard
    count, guarded like a debit; a missing one is created as `old_item`. `sibling` (the shard
    `old.shard + old.stamp.shards`) is created unless a live item is there.
    """

    old: BucketImage
    _: KW_ONLY
    exists: bool
    old_writes: Mapping[str, LimitWrite]
    old_item: dict[str, Any] | None
    sibling: dict[str, Any]
    now: int


class DynamoBucketStore:
    """Bucket reads and writes on one table, over `Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def read(self, keys: Sequence[dict[str, str]]) -> list[BucketImage]:
        """Every stored item among `keys` (strongly consistent), in any order."""
        return [items.parse(item) for item in await self.store.batch_get(keys, consistent=True)]

    async def update(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        *,
        now: int,
        ttl: int | None,
        admissions: int,
        evidence: items.Evidence | None,
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
        return bucket_wire.parse_updated(await self.store.send_update(request), image)

    async def fence(
        self, image: BucketImage, evidence: items.Evidence, blocked: int
    ) -> BucketImage:
        """Move the writer's entry past `blocked` unless that write landed (one small write)."""
        request = items.fence_request(self.store.table, image.key, evidence, blocked)
        return bucket_wire.parse_wire(await self.store.send_update(request))

    async def create(self, item: dict[str, Any], *, expired_before_s: int) -> BucketImage:
        """Write `item` if no item is stored under its key (or the stored one expired)."""
        request = items.put_request(
            self.store.table, item, replaces=None, expired_before_s=expired_before_s
        )
        return bucket_wire.parse_wire(await self.store.send_update(request))

    async def replace(self, item: dict[str, Any], *, replaces: BucketImage) -> BucketImage:
        """Write `item` over the stored one if that is still exactly `replaces`."""
        request = items.put_request(
            self.store.table, item, replaces=replaces, expired_before_s=None
        )
        return bucket_wire.parse_wire(await self.store.send_update(request))

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Double a bucket's shards: every part (and `extra`) in one transaction, all or
        nothing."""
        operations = [op for part in parts for op in self._split_operations(part)]
        await self.store.transact([*operations, *extra], token=token)

    def _split_operations(self, part: ShardSplit) -> list[dict[str, Any]]:
        sibling_op = {
            "Put": {
                "Item": part.sibling,
                "ConditionExpression": "attribute_not_exists(PK) OR #ttl < :now",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now": part.now // 1000},
            }
        }
        if not part.exists:
            assert part.old_item is not None
            create = {"Item": part.old_item, "ConditionExpression": "attribute_not_exists(PK)"}
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
        update = {
            "Key": {"PK": part.old.key["PK"], "SK": part.old.key["SK"]},
            "UpdateExpression": request["UpdateExpression"],
            "ConditionExpression": request["ConditionExpression"],
            "ExpressionAttributeNames": request["ExpressionAttributeNames"],
            "ExpressionAttributeValues": {
                k: codec.decode(v) for k, v in request["ExpressionAttributeValues"].items()
            },
        }
        return [{"Update": update}, sibling_op]
