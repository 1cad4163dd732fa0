"""Transfers between regional shards, exactly once (docs/multi-region.md; the arithmetic is
`core.transfers`).

A call whose Region's shards of a bucket cannot admit it takes capacity from a shard of another
Region before it is refused: `Transfers.into` reads every shard, picks the Region's shard to fill
and the other Region's shard that can give the most, and moves what the call lacks (or half of
what the donor can give, when that is more):

1. **give**, on the donor: the amounts leave it, guarded like a debit, and the donor records the
   transfer (`Outgoing`: recipient, number, amounts, quota periods), only while it has none to
   that recipient outstanding and its transfer count is the one read; the count goes up by one,
   so every transfer from one donor has its own number;
2. **take**, on the recipient: the amounts arrive, only if the recipient's last number taken from
   that donor is lower (then it records this one): a transfer is taken once, whoever takes it;
3. **taken**: the donor's record is removed.

Between 1 and 2 the amounts are in neither shard, never in both. A process that stops after 1
leaves the record, and whoever meets it later (a write that returns the donor's image, a call
that reads it, the sweeper) finishes 2 and 3 (`settle`): nothing is lost. A lost answer to 1 is
read back: the record is there (it landed: finish it) or not (nothing moved; a late copy of it
can land only as long as the count is unchanged, and then it is finished like any other).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..caches import BoundedDict
from ..core import transfers
from ..core.bucket import LimitWrite, full_state
from ..core.images import BucketImage, Outgoing
from .bucket_io import BucketIO
from .shards import ShardChooser
from .values import AnswerLost, ItemChanged, Target, Unavailable

log = logging.getLogger("zae_limiter")

#: A record this old is finished by whoever sees it (its giver normally takes it at once).
SETTLE_AFTER_MS = 5_000

ROUNDS = 5
DONORS_TRIED = 2


class Transfers:
    """Transfers into this process's Region's shards (see the module docstring)."""

    def __init__(self, bucket_io: BucketIO, shards: ShardChooser, clock: Callable[[], int]) -> None:
        self.bucket_io = bucket_io
        self.shards = shards
        self.clock = clock
        self.moved = 0  # transfers this process gave and saw taken (a metric)
        self._tried: BoundedDict[tuple[str, str, str], int] = BoundedDict()

    async def into(self, target: Target, found: Sequence[BucketImage]) -> Target | None:
        """The target on one of its Region's shards after capacity moved there, or None when
        no other Region's shard can give what it lacks (`found`: every shard, just read)."""
        stamp = target.stamp
        if target.moved or not self.shards.is_regional(stamp.shards):
            return None  # at most one transfer a call and target
        now = self.clock()
        bucket = (target.image.ns, target.entity_id, target.resource)
        last = self._tried.get(bucket)
        if last is not None and self.shards.images.fresh_for_rejection(last, now):
            return None  # nothing could move a moment ago: refused, as the rejection cache does
        images = {image.shard: image for image in found if image.stamp.same_rules(stamp)}
        mine = [images[s] for s in self.shards.pool(stamp.shards) if s in images]
        others = [image for s, image in images.items() if image not in mine]
        if not mine or not others:
            return None
        recipient = max(mine, key=lambda image: _fullness(image, target, now))
        wanted = _shortfall(recipient, target, now)
        donors = sorted(others, key=lambda image: -_fullness(image, target, now))
        for donor in donors[:DONORS_TRIED]:
            amounts = transfers.moves(wanted, _can_give(donor, now), _can_take(recipient, now))
            if not amounts:
                continue
            landed = await self._move(donor, recipient, amounts, now)
            if landed is not None:
                seen = self.clock()
                return replace(
                    target, image=landed, exists=True, read_now=True, seen_at=seen, moved=True
                )
        # Within the rejection cache's lifetime, calls short here are refused without trying
        # again: a Region short everywhere does not write every other Region's shards at every
        # call, meeting their writers and their refunds.
        self._tried[bucket] = now
        return None

    async def _move(
        self, donor: BucketImage, recipient: BucketImage, amounts: dict[str, int], now: int
    ) -> BucketImage | None:
        """Give from `donor`, then settle; the recipient after it took the transfer."""
        writes: dict[str, LimitWrite] = {}
        periods: dict[str, int | None] = {}
        for name, amount in amounts.items():
            params = donor.stamp.params(name)
            assert params is not None
            state = donor.states.get(name, full_state(params, donor.slot))
            write = transfers.give(params, state, now, donor.slot, amount)
            if write is None:
                return None
            writes[name] = write
            periods[name] = transfers.period_of(params, state, now, donor.slot)
        record = Outgoing(recipient.shard, donor.transfers + 1, amounts, periods, now)
        try:
            given = await self.bucket_io.give(donor, writes, record, now=now)
        except ItemChanged as changed:
            current = changed.current
            if current is not None and recipient.shard in current.outgoing:
                await self.settle(current, recipient.shard)  # another's, outstanding: finish it
            return None
        except AnswerLost:
            [current] = await self.bucket_io.read([donor.address]) or [donor]
            if recipient.shard not in current.outgoing:
                return None  # not given (a late copy, if it lands, is finished like any other)
            given = current
        except Unavailable:
            return None
        self.moved += 1
        return await self.settle(given, recipient.shard)

    async def settle(self, donor: BucketImage, recipient_shard: int) -> BucketImage | None:
        """Take the donor's outstanding transfer to `recipient_shard` (once), then remove the
        donor's record; the recipient after it, or None when it could not be taken now (the
        record stays for the next one)."""
        record = donor.outgoing.get(recipient_shard)
        if record is None:
            return None
        address = (donor.ns, donor.entity_id, donor.resource, recipient_shard)
        taken: BucketImage | None = None
        for _ in range(ROUNDS):
            found = await self.bucket_io.read([address])
            if not found:
                return None  # the recipient is gone (its entity was deleted)
            recipient = found[0]
            if recipient.incoming.get(donor.shard, 0) >= record.seq:
                taken = recipient
                break
            try:
                taken = await self._take(recipient, donor.shard, record)
                break
            except ItemChanged:
                continue  # changed since read: read again (taken by another, or plan again)
            except (AnswerLost, Unavailable):
                continue  # taking is conditional on the number: sending again is safe
        if taken is None:
            return None
        await self.bucket_io.taken(donor, recipient_shard, record.seq)
        return taken

    async def _take(self, recipient: BucketImage, donor: int, record: Outgoing) -> BucketImage:
        now = self.clock()
        writes: dict[str, LimitWrite] = {}
        for name, amount in record.amounts.items():
            params = recipient.stamp.params(name)
            if params is None:
                continue  # no longer a limit of the bucket: nothing to take it into
            state = recipient.states.get(name, full_state(params, recipient.slot))
            write, _ = transfers.take(
                params, state, now, recipient.slot, amount, record.periods.get(name)
            )
            writes[name] = write
        return await self.bucket_io.take(recipient, writes, donor, record.seq, now=now)

    async def settle_stale(self, image: BucketImage) -> None:
        """Finish every transfer `image` records that its giver left behind."""
        now = self.clock()
        for shard, record in list(image.outgoing.items()):
            if now - record.at > SETTLE_AFTER_MS:
                try:
                    await self.settle(image, shard)
                except (ItemChanged, Unavailable) as exc:
                    log.warning("finishing a transfer from %s failed: %s", image.address, exc)


def _fullness(image: BucketImage, target: Target, now: int) -> float:
    """How much of what the target asks for the shard could cover (the least of its limits)."""
    gives = _can_give(image, now)
    return min(
        (gives.get(name, 0) / amount for name, amount in target.amounts.items() if amount > 0),
        default=0.0,
    )


def _shortfall(image: BucketImage, target: Target, now: int) -> dict[str, int]:
    """What the shard lacks of each of the target's amounts (milli)."""
    gives = _can_give(image, now)
    return {
        name: amount - gives.get(name, 0)
        for name, amount in target.amounts.items()
        if amount > gives.get(name, 0)
    }


def _can_give(image: BucketImage, now: int) -> dict[str, int]:
    return {
        p.name: transfers.available(
            p, image.states.get(p.name, full_state(p, image.slot)), now, image.slot
        )
        for p in image.stamp.limits
    }


def _can_take(image: BucketImage, now: int) -> dict[str, int | None]:
    return {
        p.name: transfers.room(
            p, image.states.get(p.name, full_state(p, image.slot)), now, image.slot
        )
        for p in image.stamp.limits
    }
