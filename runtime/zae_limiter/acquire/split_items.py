"""A shard split one item at a time, for a table without transactions (docs/multi-region.md).

A split is one transaction elsewhere (`DynamoBucketIO.split`). On a table with multi-Region
strong consistency each old shard is split on its own, shard 0 last (it holds the count, so
writers learn of the new layout from it only when every other shard is split):

1. the old shard keeps its part and records its new sibling, whole (`BucketImage.sibling`, `sp`),
   in the one conditional write that halves it: from then on the sibling's part is in neither
   shard, never in both (`core.shard_split`'s arithmetic, unchanged);
2. the sibling is created, only where no live item is (so a second creation never lands);
3. the record is removed.

A splitter that stops between 1 and 3 leaves the record, and whoever meets it finishes the job
(`settle_sibling`): a later split, a write that finds the sibling missing (`Waves`), a process
that sees the record older than `SETTLE_AFTER_MS`. Every step is idempotent, so finishing twice
creates the sibling once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..core.images import BucketImage
from .bucket_io import ShardSplit
from .values import AnswerLost, ItemChanged

#: A split's record older than this (by the sibling's creation time) is finished by whoever
#: sees it: its splitter normally removes it within a few round trips.
SETTLE_AFTER_MS = 2_000
RESENDS = 3


class SplitDoor(Protocol):
    """The single-item requests a split needs (`DynamoBucketIO`)."""

    async def split_first(self, part: ShardSplit) -> BucketImage: ...

    async def create(self, new: BucketImage, *, expired_before_s: int) -> BucketImage: ...

    async def forget_sibling(self, old: BucketImage) -> None: ...

    async def read(self, addresses: Sequence[tuple[str, str, str, int]]) -> list[BucketImage]: ...


class SplitItems:
    """Splits on a table without transactions (see the module docstring)."""

    def __init__(self, door: SplitDoor) -> None:
        self.door = door

    async def split(self, parts: Sequence[ShardSplit]) -> None:
        """Each part in turn, shard 0 last; `ItemChanged(None)` when a shard changed since it
        was read (the caller reads again: the shards already split are left out then)."""
        for part in sorted(parts, key=lambda p: -p.old.shard):
            old = await self._first(part)
            await self.settle_sibling(old)

    async def _first(self, part: ShardSplit) -> BucketImage:
        """Step 1 for one part: the old shard halved, its sibling recorded on it."""
        try:
            return await self.door.split_first(part)
        except ItemChanged:
            raise ItemChanged(None) from None
        except AnswerLost:
            for found in await self.door.read([part.old.address]):
                pending = found.sibling
                if pending is not None and pending.generation == part.sibling.generation:
                    return found  # the lost answer's write landed
            raise ItemChanged(None) from None  # read again: a late copy is found by then

    async def settle_sibling(self, old: BucketImage) -> BucketImage | None:
        """Steps 2 and 3 for the record on `old`."""
        sibling = old.sibling
        if sibling is None:
            return None
        created: BucketImage | None = None
        for _ in range(RESENDS + 1):
            try:
                created = await self.door.create(sibling, expired_before_s=0)
                break
            except ItemChanged as exists:
                created = exists.current  # created before (by this or another process)
                break
            except AnswerLost:
                continue  # the same creation again: it lands once
        if created is None:
            found = await self.door.read([sibling.address])
            if not found:
                raise ItemChanged(None)  # not created: the record stays for the next one
            created = found[0]
        await self.door.forget_sibling(old)
        return created
