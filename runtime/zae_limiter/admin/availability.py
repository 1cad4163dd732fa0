"""`check_availability`: balances and waits, read at one instant, writing nothing (§5.16)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from .. import validation
from ..acquire import limit_statuses
from ..core import bucket
from ..core.bucket import MILLI
from ..dynamo import bucket_items as items
from ..dynamo import keys
from ..dynamo.bucket_items import BucketImage, Stamp
from ..errors import ResourceDisabled, ValidationError
from ..limits import Limit, check_limit_list
from ..models import Availability, LimitStatus
from ..resolution import stamp_for
from .base import AdminBase


class AvailabilityMixin(AdminBase):
    async def check_availability(
        self,
        entity_id: str,
        resource: str,
        needed: dict[str, int] | None = None,
        limits: list[Limit] | None = None,
    ) -> Availability:
        """Balances summed over shards, and the wait until `needed` fits. Not a reservation."""
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        wanted = validation.amounts(needed or {}, "needed")
        if limits is not None:
            check_limit_list(limits)
        (_, resolved), found = await asyncio.gather(
            self._resolver.resolve_many(entity_id, [resource]),
            self._store.batch_get(
                [keys.bucket(self._ns, entity_id, resource, 0)], consistent=False
            ),
        )
        now = self._clock()
        res = resolved[resource]
        if res.disabled.startswith("disabled:"):
            raise ResourceDisabled(entity_id, resource, res.disabled.split(":", 1)[1])
        chosen = tuple(limits) if limits is not None else res.limits
        if chosen is None:
            return Availability(
                entity_id, resource, now, [], bypassed=res.disabled.startswith("bypass")
            )
        stamp = stamp_for(res, chosen, now=now)
        unknown = [n for n in wanted if stamp.params(n) is None]
        if unknown:
            raise ValidationError(
                "needed", unknown[0], f"{resource!r} declares {list(stamp.names)} for {entity_id!r}"
            )
        stored = items.parse(found[0]) if found else None
        if stored is not None and stored.expired(now):
            stored = None
        shards = stored.stamp.shards if stored else 1
        images = [stored] if stored else []
        if shards > 1:
            others = await self._store.batch_get(
                [keys.bucket(self._ns, entity_id, resource, s) for s in range(1, shards)],
                consistent=False,
            )
            images += [items.parse(i) for i in others]
        stamp = replace(stamp, shards=shards)
        requested = {n: a * MILLI for n, a in wanted.items()}
        bypass = res.disabled.startswith("bypass")
        per_shard = [
            limit_statuses(
                _as_stamped(
                    stamp,
                    image,
                    BucketImage(self._ns, entity_id, resource, shard, stamp, 0, {}),
                    now,
                ),
                requested,
                now,
                bypass=bypass,
            )
            for shard, image in _by_shard(images, shards)
        ]
        statuses = [_merge(column, bypass) for column in zip(*per_shard, strict=True)]
        return Availability(entity_id, resource, now, statuses, bypassed=bypass)


def _by_shard(images: list[BucketImage], shards: int) -> list[tuple[int, BucketImage | None]]:
    found = {image.shard: image for image in images}
    return [(shard, found.get(shard)) for shard in range(shards)]


def _as_stamped(
    stamp: Stamp, stored: BucketImage | None, blank: BucketImage, now: int
) -> BucketImage:
    """One shard's stored state seen under the current config (converted where it changed)."""
    states = {}
    stored_at = stored.written_at if stored else None  # when the stored stamp was in force
    for params in stamp.limits:
        old = stored.stamp.params(params.name) if stored and not stored.expired(now) else None
        state = stored.states.get(params.name) if stored and old else None
        if old is None or state is None:
            states[params.name] = bucket.full_state(params, stamp.shards)
        elif old == params and not bucket.window_passed(old, stored_at, now):
            states[params.name] = state
        else:
            states[params.name] = bucket.convert(
                old, params, state, now, stamp.shards, stamp.shards, since=stored_at
            )
    return replace(blank, states=states)


def _merge(column: tuple[LimitStatus, ...], bypass: bool) -> LimitStatus:
    """One limit over every shard: balances summed; a request must fit one shard's share."""
    first = column[0]
    available = sum(s.available for s in column)
    ceiling = first.max_request or 0
    exceeded = (
        not bypass
        and not first.soft
        and first.requested > 0
        and (first.requested > ceiling or not any(not s.exceeded for s in column))
    )
    waits = [s.retry_after_seconds for s in column if s.exceeded]
    return replace(
        first,
        available=available,
        exceeded=exceeded,
        retry_after_seconds=min(waits) if exceeded and waits else 0.0,
    )
