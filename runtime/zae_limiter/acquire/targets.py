"""Finding the bucket items an acquire writes: from the image cache (warm) or by reading them.

The warm path knows each item from the image its last write returned (`ImageCache`), so it writes
without reading. The slow path (first use, an expired item, or config this process knows is
newer than the item's stamp) reads the config levels and the items in one wave, plus one for a
cascade parent, and restamps items whose rules changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import concurrent_limits
from .. import config as cfg
from ..caches import BoundedSet, ImageCache
from ..core.bucket import MILLI, Kind
from ..core.evolve import evolve
from ..core.images import BucketImage, Stamp
from ..errors import ResourceDisabled, ValidationError
from ..gathering import gather_or_end
from ..limits import Limit
from ..resolution import Resolver, stamp_for
from ..unmetered import Unmetered
from . import planning
from .bucket_io import BucketIO
from .lane_calls import Closed
from .shards import ShardChooser
from .values import ENTITY, PARENT, ResourcePlan, Target, Unavailable

log = logging.getLogger("zae_limiter")

Loaded = dict[str, tuple[cfg.Resolved, Target | None]]
Restamp = Callable[[BucketImage, Stamp], Awaitable[BucketImage]]


@dataclass(frozen=True)
class _Restamp:
    resource: str
    image: BucketImage
    stamp: Stamp


class TargetFinder:
    """Finds and loads the targets of acquires for one namespace scope."""

    def __init__(
        self,
        bucket_io: BucketIO,
        ns: str,
        resolver: Resolver,
        images: ImageCache,
        clock: Callable[[], int],
        shards: ShardChooser,
        restamp: Restamp,
    ) -> None:
        self.bucket_io = bucket_io
        self.ns = ns
        self.resolver = resolver
        self.images = images
        self.clock = clock
        self.shards = shards
        self.restamp = restamp
        self._reads: dict[
            tuple[str, tuple[str, ...]],
            asyncio.Future[tuple[dict[str, cfg.Resolved], list[BucketImage]]],
        ] = {}
        #: the unmetered policy (unmetered.py); the repository sets it
        self.unmetered: Unmetered | None = None
        self._warned_parent_fallback: BoundedSet[tuple[str, str]] = BoundedSet()

    # --- warm: the image cache ---------------------------------------------------------------

    def cached(
        self, entity_id: str, resource: str, role: str, override: Sequence[Limit] | None, now: int
    ) -> Target | None:
        """The target as the image cache knows it, if that image can be written as it is."""
        hit = self.images.newest(self.ns, entity_id, resource)
        if hit is None:
            return None
        image, seen_at = hit
        if not self._still_current(image, override, now):
            return None
        target = Target(
            entity_id, resource, role, image, exists=True, seen_at=seen_at, read_now=False
        )
        return self.shards.place(target)

    def _still_current(
        self, image: BucketImage, override: Sequence[Limit] | None, now: int
    ) -> bool:
        if image.expired(now) or image.stamp.is_disabled:
            return False
        res_v, sys_v = self.resolver.cached_versions(image.resource)
        if res_v is not None and res_v > image.stamp.resource_version:
            return False
        if sys_v is not None and sys_v > image.stamp.system_version:
            return False
        if override is not None:
            wanted = tuple(cfg.to_params(lim, now) for lim in override)
            if not image.stamp.override or image.stamp.limits != wanted:
                return False
        elif image.stamp.override:
            return False
        if not image.stamp.limits:
            return False  # restamped to no limits: resolve again (unmetered)
        # a schedule entry began or ended: restamp, like a config change
        return not planning.entries_moved(image, now)

    # --- slow: reading config and items ----------------------------------------------------------

    async def _read(
        self, entity_id: str, resources: tuple[str, ...]
    ) -> tuple[dict[str, cfg.Resolved], list[BucketImage]]:
        """The slow path's one wave of reads. Concurrent calls for the same entity and resources
        share one wave (many tasks starting on a cold entity at once read it once)."""
        key = (entity_id, resources)
        pending = self._reads.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read_once(entity_id, resources))
            self._reads[key] = pending
            pending.add_done_callback(lambda done: self._read_ended(key, done))
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if pending.cancelled() and (task is None or not task.cancelling()):
                raise Unavailable(Closed()) from None  # `close()` ended it, not this caller
            raise

    def close(self) -> None:
        """`close()`: the shared reads still going end (a read changes nothing, and one whose
        callers all left would go on trying a table that stopped answering)."""
        for pending in list(self._reads.values()):
            pending.cancel()

    def _read_ended(self, key: tuple[str, tuple[str, ...]], done: asyncio.Future[Any]) -> None:
        self._reads.pop(key, None)
        if not done.cancelled():
            done.exception()  # seen, also when every caller waiting for it has left

    async def _read_once(
        self, entity_id: str, resources: tuple[str, ...]
    ) -> tuple[dict[str, cfg.Resolved], list[BucketImage]]:
        (_, resolved), found = await gather_or_end(
            self.resolver.resolve_many(entity_id, resources),
            self.bucket_io.read([(self.ns, entity_id, r, 0) for r in resources]),
        )
        return resolved, found

    async def load(
        self,
        entity_id: str,
        resources: Sequence[str],
        role: str,
        override: Sequence[Limit] | None,
    ) -> Loaded:
        """Slow path for one entity: read config and items in one wave, restamp where needed."""
        resolved, found = await self._read(entity_id, tuple(resources))
        now = self.clock()
        by_resource = {image.resource: image for image in found if image.shard == 0}
        out: Loaded = {}
        restamps: list[_Restamp] = []
        for resource in resources:
            res = resolved[resource]
            limits = tuple(override) if override is not None else res.limits
            if limits is None:
                out[resource] = (res, None)
                continue
            if role == PARENT and res.source in ("resource", "system"):
                self._note_parent_fallback(entity_id, resource)
            wanted = stamp_for(res, limits, override=override is not None, now=now)
            existing = by_resource.get(resource)
            target = self._loaded(entity_id, resource, role, existing, wanted, now)
            if target is None:
                assert existing is not None
                stamp = replace(wanted, shards=existing.stamp.shards)
                restamps.append(_Restamp(resource, existing, stamp))
            out[resource] = (res, target)
        if restamps:
            done = await gather_or_end(*(self.restamp(r.image, r.stamp) for r in restamps))
            now = self.clock()
            for job, image in zip(restamps, done, strict=True):
                target = Target(
                    entity_id, job.resource, role, image, exists=True, seen_at=now, read_now=True
                )
                out[job.resource] = (out[job.resource][0], target)
        return out

    def _loaded(
        self,
        entity_id: str,
        resource: str,
        role: str,
        existing: BucketImage | None,
        wanted: Stamp,
        now: int,
    ) -> Target | None:
        """The target on the item as read; None when it must be restamped first."""
        if existing is None or existing.expired(now):
            seq = existing.stamp_seq + 1 if existing is not None else 1
            image = planning.blank_image(self.ns, entity_id, resource, wanted, seq)
            return Target(
                entity_id, resource, role, image, exists=False, seen_at=now, read_now=True
            )
        self.images.put(existing, now)
        current = (
            planning.newer_or_same(existing.stamp, wanted)
            and existing.stamp.same_rules(replace(wanted, shards=existing.stamp.shards))
            and not planning.entries_moved(existing, now)
        )
        if not current and not planning.newer(existing.stamp, wanted):
            return None
        if not current:
            # The item knows newer config than our cache: trust it, refresh the cache later.
            self.resolver.forget(resource)
        target = Target(
            entity_id, resource, role, existing, exists=True, seen_at=now, read_now=True
        )
        return self.shards.place(target)

    # --- an acquire's plans ----------------------------------------------------------------------

    async def targets(
        self,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        override: Sequence[Limit] | None,
    ) -> list[ResourcePlan]:
        """The items an acquire writes, resource by resource (child, then cascade parent)."""
        plans, slow = self._warm(entity_id, requests, override)
        # Items known from earlier writes: learn of resource/system changes once per TTL.
        stale = [r for r in plans if plans[r].child and self.resolver.needs_refresh(r)]
        if stale:
            await self.resolver.refresh(stale)
            now = self.clock()
            for resource in stale:
                if self.cached(entity_id, resource, ENTITY, override, now) is None:
                    del plans[resource]
                    slow.append(resource)
        resolved_slow: dict[str, cfg.Resolved] = {}
        if slow:
            loaded = await self.load(entity_id, slow, ENTITY, override)
            for resource, (res, target) in loaded.items():
                resolved_slow[resource] = res
                if target is None:
                    self.resolver.cache.put(("unmetered", entity_id, resource), res, self.clock())
                plans[resource] = ResourcePlan(resource, requests[resource], target, None)
        await self._add_parents(entity_id, plans, resolved_slow)
        ordered = _with_amounts(entity_id, [plans[r] for r in requests])
        for plan in ordered:
            if plan.child is None and self.unmetered is not None:  # count, warn, or refuse
                await self.unmetered.admit(plan.resource, read_now=plan.resource in resolved_slow)
        return ordered

    def _warm(
        self,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        override: Sequence[Limit] | None,
    ) -> tuple[dict[str, ResourcePlan], list[str]]:
        """Plans the image cache answers, and the resources it does not."""
        now = self.clock()
        plans: dict[str, ResourcePlan] = {}
        slow: list[str] = []
        for resource, amounts in requests.items():
            target = self.cached(entity_id, resource, ENTITY, override, now)
            unmetered = self.resolver.cache.get(("unmetered", entity_id, resource), now)
            if target is not None:
                plans[resource] = ResourcePlan(resource, amounts, target, None)
            elif unmetered[0] and override is None:
                plans[resource] = ResourcePlan(resource, amounts, None, None)
            else:
                slow.append(resource)
        return plans, slow

    async def _add_parents(
        self,
        entity_id: str,
        plans: dict[str, ResourcePlan],
        resolved_slow: dict[str, cfg.Resolved],
    ) -> None:
        """Set each plan's cascade parent (from the cache, else read in one wave per parent)."""
        parent_of: dict[str, str] = {}
        for resource, plan in plans.items():
            if plan.child is not None:
                if plan.child.stamp.cascade and plan.child.stamp.parent:
                    parent_of[resource] = plan.child.stamp.parent
                continue
            res = resolved_slow.get(resource) or self.resolver.cache.peek(
                ("unmetered", entity_id, resource)
            )
            if res is not None and res.cascade and res.parent:
                parent_of[resource] = res.parent
        need_parent: dict[str, list[str]] = {}
        now = self.clock()
        for resource, parent in parent_of.items():
            target = self.cached(parent, resource, PARENT, None, now)
            if target is not None:
                plans[resource] = replace(plans[resource], parent=target)
            else:
                need_parent.setdefault(parent, []).append(resource)
        for parent, parent_resources in need_parent.items():
            loaded = await self.load(parent, parent_resources, PARENT, None)
            for resource, (_, target) in loaded.items():
                plans[resource] = replace(plans[resource], parent=target)

    # --- notes -----------------------------------------------------------------------------------

    def _note_parent_fallback(self, parent: str, resource: str) -> None:
        if (parent, resource) not in self._warned_parent_fallback:
            self._warned_parent_fallback.add((parent, resource))
            log.warning(
                "cascade parent %r has no limits of its own for %r: it is judged on the "
                "resource or system defaults (one user's allowance); set its own limits",
                parent,
                resource,
            )


def _with_amounts(entity_id: str, ordered: list[ResourcePlan]) -> list[ResourcePlan]:
    """Plans with each target's amounts (milli); raises on a disabled item or an unknown name.

    A disabled flag outranks everything else. A parent that declares none of the names is
    dropped.
    """
    for plan in ordered:
        for target in plan.targets:
            if target.stamp.is_disabled:
                raise ResourceDisabled(target.entity_id, plan.resource, target.stamp.flag_level)
    out = []
    for plan in ordered:
        child, parent = plan.child, plan.parent
        if child is not None:
            unknown = [n for n in plan.amounts if child.stamp.params(n) is None]
            if unknown:
                raise ValidationError(
                    "limit name",
                    unknown[0],
                    f"resource {plan.resource!r} declares {list(child.stamp.names)} "
                    f"for {entity_id!r}; consume only those",
                )
            _check_in_flight(child.stamp, plan.amounts, plan.resource, entity_id)
            child = evolve(child, amounts={n: a * MILLI for n, a in plan.amounts.items()})
        if parent is not None:
            _check_in_flight(parent.stamp, plan.amounts, plan.resource, parent.entity_id)
            mine = {
                n: a * MILLI for n, a in plan.amounts.items() if parent.stamp.params(n) is not None
            }
            parent = evolve(parent, amounts=mine) if mine else None
        out.append(ResourcePlan(plan.resource, plan.amounts, child, parent))
    return out


def _check_in_flight(stamp: Stamp, amounts: dict[str, int], resource: str, entity_id: str) -> None:
    for params in stamp.limits:  # one pass, no lookup: this runs on every acquire
        if params.kind == Kind.CONCURRENT and params.name in amounts:
            where = f"{resource!r} for {entity_id!r}"
            amount = amounts[params.name]
            concurrent_limits.check_amount(params.name, amount, params.capacity // MILLI, where)
