"""Write sharding on the acquire path: which shard a call writes, when a bucket is too hot, and
the parts of a split (sent by `waves.Waves.split`). No I/O (docs/sharding.md).

A sharded bucket is written on a random shard. Once the call's amounts are known, a shard that
cannot hold them (a small limit lives on fewer shards than the bucket has) or that this process's
last image of it shows short is avoided; a shard that refuses makes the call try another, up to
`MIN_SHARDS_TRIED`; then the waves read every shard once (`Waves.write_all`), so a call is
refused only when no shard can admit it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..caches import BoundedDict, ImageCache
from ..core import bucket
from ..core.bucket import LimitWrite, Slot, State
from ..core.images import BucketImage, Stamp
from ..core.regions import Regional, is_regional
from ..core.shard_split import split_limit, too_small_to_double
from . import planning
from .bucket_io import ShardSplit
from .values import Target

MAX_SHARDS = 32
MIN_SHARDS_TRIED = 3  # a sharded bucket is not rejected after one short shard
SPLIT_WRITES_PER_SECOND = 1_000.0  # about DynamoDB's per-partition write limit
RATE_SPAN_MS = 1_000


class ShardChooser:
    """Moves targets between the shards of their bucket, from what this process has seen."""

    def __init__(
        self,
        ns: str,
        images: ImageCache,
        clock: Callable[[], int],
        regional: Regional | None = None,
    ) -> None:
        self.ns = ns
        self.images = images
        self.clock = clock
        #: This process's Region on a multi-Region table: it writes its Region's shards only
        #: (docs/multi-region.md).
        self.regional = regional

    def pool(self, shards: int) -> list[int]:
        """The shards of a bucket of `shards` shards this process may write."""
        if self.regional is None:
            return list(range(shards))
        return self.regional.mine(shards)

    def is_regional(self, shards: int) -> bool:
        """Whether a bucket of `shards` shards gives this process's Region shards of its own."""
        return self.regional is not None and is_regional(shards, self.regional.regions)

    def _shard_image(self, like: BucketImage, shard: int) -> tuple[BucketImage, int]:
        """This process's image of one shard, or a stand-in built from a sibling's stamp."""
        hit = self.images.get((self.ns, like.entity_id, like.resource, shard))
        if hit is not None and hit[0].stamp_seq >= like.stamp_seq:
            return hit
        return replace(like, shard=shard, evidence={}, writes=0), 0

    def _known_short(self, target: Target, shard: int, now: int) -> bool:
        """The rejection cache knows this shard cannot admit the target's amounts."""
        hit = self.images.get((self.ns, target.entity_id, target.resource, shard))
        if hit is None or not self.images.fresh_for_rejection(hit[1], now):
            return False
        return planning.refused_on_image(replace(target, image=hit[0]), now)

    def _seems_short(self, target: Target, shard: int, now: int) -> bool:
        """This process's last image of the shard, however old, brought to now, refuses the
        target's amounts (a hint only: another process may have freed some since)."""
        hit = self.images.get((self.ns, target.entity_id, target.resource, shard))
        if hit is None or hit[0].stamp_seq < target.image.stamp_seq:
            return False
        return planning.refused_on_image(replace(target, image=hit[0]), now)

    def _can_hold(self, target: Target, shard: int) -> bool:
        """Every amount is within this shard's share of its limit (plus top-ups it is known to
        hold): a request above that can never be admitted there."""
        slot = Slot(shard, target.stamp.shards)
        hit = self.images.get((self.ns, target.entity_id, target.resource, shard))
        for name, amount in target.amounts.items():
            params = target.stamp.params(name)
            if params is None or params.soft or target.stamp.is_bypass:
                continue
            state = hit[0].states.get(name) if hit is not None else None
            topped = state.tu if state is not None and params.kind != bucket.Kind.RATE else 0
            if amount > params.shard_capacity(slot) + topped:
                return False
        return True

    def _choose(self, target: Target, skip: frozenset[int], now: int) -> int | None:
        """A random shard that can hold the amounts and does not seem short; else one not known
        to be short (rejection cache); None when none is left."""
        pool = self.pool(target.stamp.shards)
        guess = random.choice(pool)  # the warm case: any shard will do
        if (
            guess not in skip
            and self._can_hold(target, guess)
            and not self._seems_short(target, guess, now)
        ):
            return guess
        holding = [s for s in pool if s not in skip and self._can_hold(target, s)]
        likely = [s for s in holding if not self._seems_short(target, s, now)]
        pool = likely or [s for s in holding if not self._known_short(target, s, now)]
        return random.choice(pool) if pool else None

    def _moved(self, target: Target, shard: int, tried: frozenset[int]) -> Target:
        if shard == target.image.shard:
            return replace(target, tried=tried)
        image, seen_at = self._shard_image(target.image, shard)
        return replace(
            target, image=image, seen_at=seen_at, read_now=False, exists=True, tried=tried
        )

    def place(self, target: Target) -> Target:
        """Spread load: a random shard, steered away from shards known to be short."""
        shards = target.stamp.shards
        if shards <= 1:
            return target
        now = self.clock()
        pool = self.pool(shards)
        candidates = [s for s in pool if not self._known_short(target, s, now)]
        shard = random.choice(candidates or pool)
        return self._moved(target, shard, frozenset({shard}))

    def another(self, target: Target, now: int) -> Target | None:
        """After a shard refused: the target on another shard, or None when up to 3 (or all, if
        fewer) were tried, or no other can hold the amounts and is not known to be short."""
        shards = target.stamp.shards
        tried = target.tried | {target.image.shard}
        pool = self.pool(shards)
        if shards <= 1 or len(tried & set(pool)) >= min(MIN_SHARDS_TRIED, len(pool)):
            return None
        shard = self._choose(target, tried, now)
        return None if shard is None else self._moved(target, shard, tried)

    def short_everywhere(self, target: Target, now: int) -> tuple[bool, Target]:
        """Whether what this process knows refuses the target on every shard (within the
        rejection cache's lifetime; a sharded bucket: every shard that could hold it is known
        short); and the target, moved to a shard it may be admitted on."""
        if target.stamp.shards <= 1:
            fresh = target.read_now or self.images.fresh_for_rejection(target.seen_at, now)
            return fresh and planning.refused_on_image(target, now), target
        here = target.image.shard
        mine = self.pool(target.stamp.shards)
        if (
            here in mine
            and self._can_hold(target, here)
            and not self._seems_short(target, here, now)
        ):
            return False, target
        shard = self._choose(target, frozenset(), now)
        if shard is None and self.is_regional(target.stamp.shards):
            # Its Region's shards cannot: known short everywhere only if every other Region's
            # shard is known short too (else a transfer may admit it).
            others = [s for s in range(target.stamp.shards) if s not in mine]
            if all(self._known_short(target, s, now) for s in others):
                return True, self._moved(target, mine[0], frozenset({mine[0]}))
            return False, self._moved(target, mine[0], frozenset({mine[0]}))
        if shard is None:  # judged on shard 0, which holds the largest shares
            return True, self._moved(target, 0, frozenset({0}))
        return False, self._moved(target, shard, frozenset({shard}))

    def fitting(self, target: Target, found: list[BucketImage], now: int) -> Target | None:
        """From every shard just read: the target on a random one that admits it, or None."""
        mine = set(self.pool(target.stamp.shards))
        admitting = [
            image
            for image in found
            if image.shard in mine
            and image.stamp.same_rules(target.stamp)
            and not planning.refused_on_image(replace(target, image=image), now)
        ]
        if not admitting:
            return None
        image = random.choice(admitting)
        return replace(target, image=image, exists=True, read_now=True, seen_at=now, surveyed=True)


@dataclass
class _Rate:
    writes: int
    written_at: int
    shards: int


class SplitDetector:
    """Estimates each shard's write rate from the images writes return."""

    def __init__(self, threshold: float = SPLIT_WRITES_PER_SECOND) -> None:
        self.threshold = threshold
        self.span_ms = RATE_SPAN_MS
        self._rates: BoundedDict[tuple[str, str, str, int], _Rate] = BoundedDict()

    def too_hot(self, image: BucketImage) -> bool:
        """Record `image`; whether its shard wrote faster than the threshold over the span."""
        key = ImageCache.key_of(image)
        first = self._rates.get(key)
        shards = image.stamp.shards
        if first is None or image.writes < first.writes or first.shards != shards:
            self._rates[key] = _Rate(image.writes, image.written_at, shards)  # since the split
            return False
        elapsed = image.written_at - first.written_at
        if elapsed < self.span_ms:
            return False
        self._rates[key] = _Rate(image.writes, image.written_at, shards)
        rate = (image.writes - first.writes) * 1000 / elapsed
        return (
            rate > self.threshold
            and shards < MAX_SHARDS
            and too_small_to_double(image.stamp.limits, shards) is None
        )


def split_parts(
    shard_zero: BucketImage,
    found: dict[int, BucketImage],
    now: int,
    maker: planning.ItemMaker,
    *,
    done: set[int] | frozenset[int] = frozenset(),
) -> list[ShardSplit]:
    """The parts of doubling the shards of `shard_zero`'s bucket, from the shards `found`
    (leaving out the shards in `done`, already split)."""
    shards = shard_zero.stamp.shards
    parts = []
    for shard in range(shards):
        if shard in done:
            continue
        image = found.get(shard)
        exists = image is not None
        if image is None:
            image = planning.blank_image(
                shard_zero.ns,
                shard_zero.entity_id,
                shard_zero.resource,
                shard_zero.stamp,
                shard_zero.stamp_seq,
                shard,
            )
            image = replace(image, rearms=shard_zero.rearms)  # created with the bucket's count
        parts.append(_split_part(image, now, maker, exists=exists))
    return parts


def _split_part(
    image: BucketImage, now: int, maker: planning.ItemMaker, *, exists: bool
) -> ShardSplit:
    shards = image.stamp.shards
    doubled = shards * 2
    old_writes: dict[str, LimitWrite] = {}
    sibling_states: dict[str, State] = {}
    for params in image.stamp.limits:
        state = image.states.get(params.name, bucket.full_state(params, image.slot))
        old_writes[params.name], sibling_states[params.name] = split_limit(
            params, state, now, image.slot
        )
    stamp: Stamp = replace(image.stamp, shards=doubled)
    seq = image.stamp_seq + 1
    sibling = maker.image_for(image, stamp, seq, sibling_states, now, shard=image.shard + shards)
    sibling = replace(sibling, rearms=image.rearms)  # the new items keep the alert re-arm count
    old_new = None
    if not exists:
        slot = Slot(image.shard, doubled)
        states = {p.name: bucket.full_state(p, slot) for p in stamp.limits}
        old_new = replace(maker.image_for(image, stamp, seq, states, now), rearms=image.rearms)
    return ShardSplit(
        image, exists=exists, old_writes=old_writes, old_new=old_new, sibling=sibling, now=now
    )
