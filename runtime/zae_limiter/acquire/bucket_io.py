"""`BucketIO`: the bucket operations the acquire path sends, as a protocol in domain terms.

`dynamo_io.DynamoBucketIO` implements it on DynamoDB (the one module of `acquire/` that
talks to `zae_limiter.dynamo`); the unit tests use an in-memory double of it
(`tests/support/memory_bucket_io.py`). It speaks images, never stored items, and every method
raises only the acquire path's errors (`values`): `ItemChanged` with the stored item as an image
(None when there is none), `AnswerLost` (sent, not confirmed) or `Unavailable` (not applied).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol

from ..core.bucket import LimitWrite
from ..core.images import Address, BucketImage, Evidence, Outgoing


@dataclass(frozen=True)
class ShardSplit:
    """One old shard of a bucket whose shard count doubles, and its new sibling.

    An existing old shard gets `old_writes` (its share moves to the sibling) and the new shard
    count, guarded like a debit; a missing one is created as `old_new`. `sibling` (the shard
    `old.shard + old.stamp.shards`) is created unless a live item is there.
    """

    old: BucketImage
    _: KW_ONLY
    exists: bool
    old_writes: Mapping[str, LimitWrite]
    old_new: BucketImage | None
    sibling: BucketImage
    now: int


class BucketIO(Protocol):
    async def read(self, addresses: Sequence[Address]) -> list[BucketImage]:
        """Every stored item among `addresses` (strongly consistent), in any order."""
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
        revokes: tuple[int, ...] = (),
    ) -> BucketImage:
        """Apply `writes` if the item still has `image`'s stamp sequence and the guards hold;
        with `evidence`, also only if the writer's entry is below its sequence (then set to
        it); `revokes` marks a refund of never-kept debits (docs/alerts.md). Returns the new
        item."""
        ...

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        """Set the writer's entry to `evidence.seq` if the item exists and the entry is below
        `blocked` (so no write with sequence `blocked` can land afterwards)."""
        ...

    async def create(self, new: BucketImage, *, expired_before_s: int) -> BucketImage:
        """Write the item `new` describes if its address holds nothing (or an item expired
        before that second)."""
        ...

    async def replace(self, new: BucketImage, *, replaces: BucketImage) -> BucketImage:
        """Write the item `new` describes over the stored one if that is still exactly
        `replaces`."""
        ...

    async def split(
        self, parts: Sequence[ShardSplit], *, token: str, extra: Sequence[dict[str, Any]] = ()
    ) -> None:
        """Double a bucket's shards, all parts (and the `extra` transaction operations, an
        audit event) or none; raises `ItemChanged(None)` when a part's condition failed. On a
        table without transactions the parts go one at a time, each shard recording its new
        sibling until it is created (`settle_sibling`)."""
        ...

    async def give(
        self, image: BucketImage, writes: Mapping[str, LimitWrite], record: Outgoing, *, now: int
    ) -> BucketImage:
        """A transfer's donor side (regional shards, docs/multi-region.md): `writes` and the
        record, if the shard has no transfer to that recipient outstanding and its transfer
        count is `image`'s."""
        ...

    async def take(
        self,
        image: BucketImage,
        writes: Mapping[str, LimitWrite],
        donor: int,
        seq: int,
        *,
        now: int,
    ) -> BucketImage:
        """A transfer's recipient side: `writes`, if transfer `seq` of `donor` was not taken."""
        ...

    async def taken(self, image: BucketImage, recipient: int, seq: int) -> None:
        """Remove the donor's record of transfer `seq` (taken by now)."""
        ...

    async def settle_sibling(self, old: BucketImage) -> BucketImage | None:
        """Create the split's new shard that `old` records (unless it exists), then remove the
        record; the new shard as created or found (None when `old` records none)."""
        ...
