"""`BucketStore`: the bucket operations the acquire path's waves send, as a protocol.

`zae_limiter.dynamo.bucket_store.DynamoBucketStore` implements it on DynamoDB; the unit tests
use an in-memory double of it (`tests/support/memory_store.py`). Every method raises the
transport's `ConditionFailed` (with the stored item, or None when there is none),
`UnknownOutcome` (sent, not confirmed) or another `DynamoError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..core.bucket import LimitWrite
from ..dynamo.bucket_items import BucketImage, Evidence
from ..dynamo.bucket_store import ShardSplit


class BucketStore(Protocol):
    async def read(self, keys: Sequence[dict[str, str]]) -> list[BucketImage]:
        """Every stored item among `keys` (strongly consistent), in any order."""
        ...

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
        """Apply `writes` if the item still has `image`'s stamp sequence and the guards hold;
        with `evidence`, also only if the writer's entry is below its sequence (then set to
        it). Returns the new item."""
        ...

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        """Set the writer's entry to `evidence.seq` if the item exists and the entry is below
        `blocked` (so no write with sequence `blocked` can land afterwards)."""
        ...

    async def create(self, item: dict[str, Any], *, expired_before_s: int) -> BucketImage:
        """Write `item` if its key holds nothing (or an item expired before that second)."""
        ...

    async def replace(self, item: dict[str, Any], *, replaces: BucketImage) -> BucketImage:
        """Write `item` over the stored one if that is still exactly `replaces`."""
        ...

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Double a bucket's shards, all parts (and the `extra` transaction operations, an
        audit event) or none."""
        ...
