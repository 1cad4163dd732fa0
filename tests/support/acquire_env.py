"""An acquire path on the in-memory `MemoryBucketIO`, for unit tests of its rules.

`AcquireEnv` builds an `Admission` over a `MemoryBucketIO` with a fake clock, and makes
targets on bucket items that are stored (or not) with full balances.
"""

from __future__ import annotations

from typing import Any, cast

from support.clock import FakeClock
from support.memory_bucket_io import MemoryBucketIO
from zae_limiter.acquire import Admission, Target
from zae_limiter.acquire.deadlines import Backoff
from zae_limiter.acquire.planning import blank_image
from zae_limiter.acquire.values import ENTITY
from zae_limiter.caches import ConfigCache, ImageCache
from zae_limiter.core import bucket
from zae_limiter.core.bucket import MILLI, Kind, Params, State
from zae_limiter.core.images import BucketImage, Stamp
from zae_limiter.dynamo import bucket_items, keys
from zae_limiter.resolution import Resolver

NS = "ns1"
#: 10 per minute, refilling continuously.
RPM = Params("rpm", Kind.RATE, 10 * MILLI, 10 * MILLI, 60_000)


class AcquireEnv:
    def __init__(
        self, limits: tuple[Params, ...] = (RPM,), *, backoff: Backoff | None = None
    ) -> None:
        self.clock = FakeClock()
        self.bucket_io = MemoryBucketIO()
        self.images = ImageCache(rejection_ttl_seconds=1.0, size=1_000)
        # The resolver reads config; these tests hand the targets in, so it is never called.
        resolver = Resolver(cast(Any, None), ConfigCache(60), self.clock)
        self.admission = Admission(
            self.bucket_io, NS, resolver, self.images, self.clock, 7, backoff=backoff
        )
        self.limits = limits

    def stamp(self, *, shards: int = 1, parent: str | None = None) -> Stamp:
        return Stamp(limits=self.limits, parent=parent, cascade=parent is not None, shards=shards)

    def stored(
        self,
        entity: str = "u1",
        resource: str = "search",
        *,
        shard: int = 0,
        stamp: Stamp | None = None,
        states: dict[str, State] | None = None,
    ) -> BucketImage:
        """Store an item (full balances unless `states`), as another process wrote it."""
        stamp = stamp or self.stamp()
        image = blank_image(NS, entity, resource, stamp, 1, shard)
        seed = {"seed0000": self.clock()}  # another writer's evidence entry
        new = self.admission.maker.image_for(
            image, stamp, 1, states or image.states, self.clock(), evidence=seed
        )
        return self.bucket_io.put(bucket_items.item_of(new))

    def target(
        self,
        image: BucketImage,
        amounts: dict[str, int],
        *,
        exists: bool = True,
        read_now: bool = True,
    ) -> Target:
        """A target on `image`, debiting whole `amounts`."""
        milli = {name: amount * MILLI for name, amount in amounts.items()}
        return Target(
            image.entity_id,
            image.resource,
            ENTITY,
            image,
            exists=exists,
            seen_at=self.clock(),
            read_now=read_now,
            amounts=milli,
        )

    def new_target(self, amounts: dict[str, int], resource: str = "search") -> Target:
        """A target on an item never written."""
        image = blank_image(NS, "u1", resource, self.stamp(), 1)
        return self.target(image, amounts, exists=False)

    def state(self, resource: str = "search", shard: int = 0, name: str = "rpm") -> State:
        image = self.bucket_io.image(keys.bucket(NS, "u1", resource, shard))
        assert image is not None, "no item stored"
        return image.states[name]

    def balance(self, resource: str = "search", shard: int = 0, name: str = "rpm") -> int:
        """Whole units available now on a stored item."""
        image = self.bucket_io.image(keys.bucket(NS, "u1", resource, shard))
        assert image is not None
        params = image.stamp.params(name)
        assert params is not None
        view = bucket.view(params, image.states[name], self.clock(), image.slot)
        return view.balance // MILLI

    def drained(self) -> dict[str, State]:
        """States with every limit's balance used up now."""
        out = {}
        for params in self.limits:
            full = bucket.full_state(params, bucket.WHOLE)
            write = bucket.plan_debit(
                params, full, self.clock(), bucket.WHOLE, params.capacity, enforce=True
            )
            assert write is not None
            out[params.name] = write.result
        return out
