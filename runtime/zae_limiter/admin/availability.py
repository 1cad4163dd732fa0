"""`check_availability`: balances and waits, read at one instant, writing nothing
(docs/limits-and-time.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from .. import validation
from ..acquire import limit_statuses
from ..core import bucket
from ..core.bucket import MILLI
from ..core.images import BucketImage, Stamp
from ..dynamo import bucket_items as items
from ..dynamo import keys
from ..errors import ResourceDisabled, ValidationError
from ..gathering import gather_or_end
from ..limits import Limit, check_limit_list
from ..models import Availability, LimitStatus
from ..resolution import stamp_for
from ..scope import Scope


class AvailabilityCheck:
    """`check_availability`: balances and waits at one instant, writing nothing."""

    def __init__(self, scope: Scope) -> None:
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock
        self._resolver = scope.resolver

    async def check_availability(
        self,
        entity_id: str,
        resource: str,
        needed: Mapping[str, int] | None = None,
        limits: list[Limit] | None = None,
    ) -> Availability:
        """Balances summed over shards, and the wait until `needed` fits. Not a reservation.

        Where the resource cascades for the entity, the parent is judged too (its statuses
        carry the parent's id), so `allowed` and `retry_after_seconds` answer for the whole
        acquire; a need above `max_request` never fits (docs/limits-and-time.md)."""
        return await self._availability(entity_id, resource, needed, limits, as_parent=False)

    async def _availability(
        self,
        entity_id: str,
        resource: str,
        needed: Mapping[str, int] | None,
        limits: list[Limit] | None,
        *,
        as_parent: bool,
    ) -> Availability:
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        wanted = validation.amounts(needed or {}, "needed")
        if limits is not None:
            check_limit_list(limits)
        (_, resolved), found = await gather_or_end(
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
        if as_parent:  # a parent is judged only on the limits it declares
            wanted = {n: a for n, a in wanted.items() if stamp.params(n) is not None}
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
        seen = [
            _as_stamped(
                stamp, image, BucketImage(self._ns, entity_id, resource, shard, stamp, 0, {}), now
            )
            for shard, image in _by_shard(images, shards)
        ]
        per_shard = [limit_statuses(image, requested, now, bypass=bypass) for image in seen]
        totals = [
            math.floor(
                sum(
                    bucket.exact_balance(p, image.states[p.name], now, image.slot) for image in seen
                )
                / MILLI
            )
            for p in stamp.limits
        ]
        statuses = _merge(per_shard, totals, bypass)
        if res.cascade and res.parent and not as_parent and wanted:
            parent = await self._availability(res.parent, resource, wanted, None, as_parent=True)
            if parent.needed:  # the parent declares some of the needed limits
                statuses += parent.statuses
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
            states[params.name] = bucket.full_state(params, blank.slot)
        elif old == params and not bucket.entry_passed(old, stored_at, now):
            states[params.name] = state
        else:
            states[params.name] = bucket.convert(
                old,
                params,
                state,
                now,
                blank.slot,
                since=stored_at,
                changed_at=stamp.changed_at,
            )
    return replace(blank, states=states)


def _merge(
    per_shard: list[list[LimitStatus]], totals: list[int], bypass: bool
) -> list[LimitStatus]:
    """Every limit over every shard: balances summed exactly; the request judged on the shard a
    fresh acquire would be admitted on (one where every needed amount fits), else the shard it
    fits soonest. A need above every shard's share can never fit: its wait is infinite."""
    waits = [_shard_wait(statuses) for statuses in per_shard]
    best = waits.index(min(waits))
    merged = []
    for i, judged in enumerate(per_shard[best]):
        column = [statuses[i] for statuses in per_shard]
        most = max(s.max_request or 0 for s in column)
        never = not bypass and not judged.soft and judged.requested > most
        exceeded = never or judged.exceeded
        merged.append(
            replace(
                judged,
                available=totals[i],
                max_request=most,
                exceeded=exceeded,
                retry_after_seconds=_wait(judged) if exceeded else 0.0,
            )
        )
    return merged


def _wait(status: LimitStatus) -> float:
    """A status's wait on its shard: infinite when the request is above the shard's share."""
    if status.requested > (status.max_request or 0):
        return math.inf
    return status.retry_after_seconds


def _shard_wait(statuses: list[LimitStatus]) -> float:
    """How long until every needed amount fits on this shard (0: it fits now)."""
    return max((_wait(s) for s in statuses if s.exceeded), default=0.0)
