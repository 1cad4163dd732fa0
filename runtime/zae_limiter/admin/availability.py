"""`check_availability`: balances and waits, read at one instant, writing nothing (§5.16)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from .. import validation
from ..admission import limit_statuses
from ..core import bucket
from ..core.bucket import MILLI
from ..dynamo import bucket_items as items
from ..dynamo import keys
from ..dynamo.bucket_items import BucketImage
from ..errors import ResourceDisabled, ValidationError
from ..limits import Limit, check_limit_list
from ..models import Availability
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
        stamp = stamp_for(res, chosen)
        unknown = [n for n in wanted if stamp.params(n) is None]
        if unknown:
            raise ValidationError(
                "needed", unknown[0], f"{resource!r} declares {list(stamp.names)} for {entity_id!r}"
            )
        stored = items.parse(found[0]) if found else None
        if stored is not None and stored.expired(now):
            stored = None
        shards = stored.stamp.shards if stored else 1
        stamp = replace(stamp, shards=shards)
        states = {}
        for params in stamp.limits:
            old = stored.stamp.params(params.name) if stored else None
            state = stored.states.get(params.name) if stored else None
            if old is None or state is None:
                states[params.name] = bucket.full_state(params, shards)
            elif old == params:
                states[params.name] = state
            else:
                states[params.name] = bucket.convert(old, params, state, now, shards, shards)
        image = BucketImage(self._ns, entity_id, resource, 0, stamp, 0, states)
        statuses = limit_statuses(
            image,
            {n: a * MILLI for n, a in wanted.items()},
            now,
            bypass=res.disabled.startswith("bypass"),
        )
        if shards > 1:
            statuses = [replace(s, available=s.available * shards) for s in statuses]
        return Availability(
            entity_id, resource, now, statuses, bypassed=res.disabled.startswith("bypass")
        )
