"""Admission: find the bucket items a call writes, debit them together, credit them back.

The warm path knows each item from the image its last write returned (`ImageCache`), so it writes
without reading: one conditional UpdateItem per item, all sent in one wave. The slow path (first
use, an expired item, or config this process knows is newer than the item's stamp) reads the
config levels and the items in one wave, plus one for a cascade parent, then writes.

Every write is guarded by the item's stamp sequence; a write that meets a newer stamp, or a
concurrent writer's effect, fails its condition, gets the current item back and is planned again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from . import config as cfg
from . import lanes
from .caches import ImageCache
from .core import bucket
from .core.bucket import MILLI, LimitWrite, Params, State
from .core.split import split_limit
from .dynamo import bucket_items as items
from .dynamo import codec, keys
from .dynamo.bucket_items import BucketImage, Stamp
from .dynamo.store import Store
from .dynamo.transport import ConditionFailed, DynamoError, UnknownOutcome
from .errors import RateLimitExceeded, ResourceDisabled, ValidationError
from .limits import Limit
from .models import LimitStatus
from .resolution import Resolver, stamp_for

log = logging.getLogger("zae_limiter")
_T = TypeVar("_T")

MAX_ROUNDS = 5  # write attempts per item before a contended rejection
MAX_SHARDS = 32
MIN_SHARDS_TRIED = 3  # a sharded bucket is not rejected after one short shard
SPLIT_WRITES_PER_SECOND = 1_000  # about DynamoDB's per-partition write limit
RATE_WINDOW_MS = 1_000
MAX_RESTARTS = 2  # re-resolutions when an item's rules changed under us
SETTLE_ROUNDS = 8  # attempts for exit writes and refunds


@dataclass
class Target:
    """One bucket item a call writes."""

    entity_id: str
    resource: str
    role: str  # "entity" or "parent"
    image: BucketImage
    exists: bool
    seen_at: int
    read_now: bool
    amounts: dict[str, int] = field(default_factory=dict)  # milli, names the stamp declares
    tried: set[int] = field(default_factory=set)  # shards tried in this call

    @property
    def stamp(self) -> Stamp:
        return self.image.stamp


@dataclass
class Landed:
    """What a write left on one item, so that the lease can reconcile or refund it."""

    target: Target
    debited: dict[str, int]  # milli per limit, net so far
    periods: dict[str, int | None]  # quota period each debit belongs to
    admissions: int
    bypass: bool


@dataclass
class ResourcePlan:
    """What one resource of an acquire resolved to."""

    resource: str
    amounts: dict[str, int]  # whole units, as asked
    child: Target | None  # None: unmetered for this entity
    parent: Target | None
    stamp_names: tuple[str, ...] = ()


Planner = Callable[["Target", int], "tuple[dict[str, LimitWrite], int] | None"]


class RulesChanged(Exception):
    """An item's parent, cascade or flags changed while we wrote: resolve again."""


class Unavailable(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Admission:
    """Bucket writes for one namespace scope."""

    def __init__(
        self,
        store: Store,
        ns: str,
        resolver: Resolver,
        images: ImageCache,
        clock: Callable[[], int],
        ttl_multiplier: int,
    ) -> None:
        self.store = store
        self.ns = ns
        self.resolver = resolver
        self.images = images
        self.clock = clock
        self.ttl_multiplier = ttl_multiplier
        self.split_threshold: float = SPLIT_WRITES_PER_SECOND
        self.rate_window_ms = RATE_WINDOW_MS
        self._reads: dict[
            tuple[str, tuple[str, ...]],
            asyncio.Future[tuple[dict[str, cfg.Resolved], list[dict[str, Any]]]],
        ] = {}
        self._rates: dict[tuple[str, str, str, int], tuple[int, int, int]] = {}
        self._splitting: set[tuple[str, str, str]] = set()
        self._split_tasks: set[asyncio.Future[None]] = set()
        self._warned_unmetered: set[str] = set()
        self._warned_parent_fallback: set[tuple[str, str]] = set()
        self.lanes = lanes.Lanes(
            self,
            clock,
            on_image=self._on_image,
            rules_matter=lambda planned, current: _rules_matter(planned.stamp, current.stamp),
            blank=self._blank_after,
        )

    # --- finding the items -------------------------------------------------------------------

    def _cached_target(
        self, entity_id: str, resource: str, role: str, override: Sequence[Limit] | None, now: int
    ) -> Target | None:
        hit = self.images.newest(self.ns, entity_id, resource)
        if hit is None:
            return None
        image, seen_at = hit
        if image.expired(now) or image.stamp.is_disabled:
            return None
        res_v, sys_v = self.resolver.cached_versions(resource)
        if res_v is not None and res_v > image.stamp.resource_version:
            return None
        if sys_v is not None and sys_v > image.stamp.system_version:
            return None
        if override is not None:
            wanted = tuple(cfg.to_params(lim, now) for lim in override)
            if not image.stamp.override or image.stamp.limits != wanted:
                return None
        elif image.stamp.override:
            return None
        if not image.stamp.limits:
            return None  # restamped to no limits: resolve again (unmetered)
        if _windows_moved(image, now):
            return None  # a schedule window began or ended: restamp, like a config change
        return self._on_shard(Target(entity_id, resource, role, image, True, seen_at, False))

    async def _read(
        self, entity_id: str, resources: tuple[str, ...]
    ) -> tuple[dict[str, cfg.Resolved], list[dict[str, Any]]]:
        """The slow path's one wave of reads. Concurrent calls for the same entity and resources
        share one wave (many tasks starting on a cold entity at once read it once)."""
        key = (entity_id, resources)
        pending = self._reads.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read_once(entity_id, resources))
            self._reads[key] = pending
            pending.add_done_callback(lambda _: self._reads.pop(key, None))
        return await asyncio.shield(pending)

    async def _read_once(
        self, entity_id: str, resources: tuple[str, ...]
    ) -> tuple[dict[str, cfg.Resolved], list[dict[str, Any]]]:
        bucket_keys = [keys.bucket(self.ns, entity_id, r, 0) for r in resources]
        (_, resolved), found = await asyncio.gather(
            self.resolver.resolve_many(entity_id, resources),
            self.store.batch_get(bucket_keys, consistent=True),
        )
        return resolved, found

    async def _load(
        self,
        entity_id: str,
        resources: Sequence[str],
        role: str,
        override: Sequence[Limit] | None,
    ) -> dict[str, tuple[cfg.Resolved, Target | None]]:
        """Slow path for one entity: read config and items in one wave, restamp where needed."""
        resolved, found = await self._read(entity_id, tuple(resources))
        now = self.clock()
        by_key = {item["PK"]: items.parse(item) for item in found}
        out: dict[str, tuple[cfg.Resolved, Target | None]] = {}
        restamps: list[tuple[str, BucketImage, Stamp]] = []
        for resource in resources:
            res = resolved[resource]
            limits = tuple(override) if override is not None else res.limits
            if limits is None:
                out[resource] = (res, None)
                self._note_unmetered(resource)
                continue
            if role == "parent" and res.source in ("resource", "system"):
                self._note_parent_fallback(entity_id, resource)
            existing = by_key.get(keys.bucket_partition(self.ns, entity_id, resource, 0))
            wanted = stamp_for(res, limits, override=override is not None, now=now)
            if existing is None or existing.expired(now):
                seq = existing.stamp_seq + 1 if existing is not None else 1
                image = _blank_image(self.ns, entity_id, resource, wanted, seq)
                out[resource] = (res, Target(entity_id, resource, role, image, False, now, True))
                continue
            self.images.put(existing, now)
            if (
                _newer_or_same(existing.stamp, wanted)
                and existing.stamp.same_rules(replace(wanted, shards=existing.stamp.shards))
                and not _windows_moved(existing, now)
            ):
                target = Target(entity_id, resource, role, existing, True, now, True)
                out[resource] = (res, self._on_shard(target))
                continue
            if _newer(existing.stamp, wanted):
                # The item knows newer config than our cache: trust it, refresh the cache later.
                self.resolver.forget(resource)
                target = Target(entity_id, resource, role, existing, True, now, True)
                out[resource] = (res, self._on_shard(target))
                continue
            restamps.append((resource, existing, replace(wanted, shards=existing.stamp.shards)))
            out[resource] = (res, None)
        if restamps:
            done = await asyncio.gather(
                *(self.restamp(image, stamp) for _, image, stamp in restamps)
            )
            now = self.clock()
            for (resource, _, _), image in zip(restamps, done, strict=True):
                out[resource] = (
                    out[resource][0],
                    Target(entity_id, resource, role, image, True, now, True),
                )
        return out

    def item_for(
        self,
        image: BucketImage,
        stamp: Stamp,
        seq: int,
        states: dict[str, State],
        now: int,
        *,
        shard: int | None = None,
        admissions: int = 0,
        generation: str | None = None,
        evidence: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """Every attribute of one of `image`'s bucket's items, its expiry from `states`."""
        return items.full_item(
            self.ns,
            image.entity_id,
            image.resource,
            image.shard if shard is None else shard,
            stamp,
            seq,
            states,
            admissions=admissions,
            generation=generation or items.new_op_id(),
            now=now,
            ttl=self._ttl(stamp, states, now),
            evidence=evidence,
        )

    async def restamp(self, image: BucketImage, stamp: Stamp) -> BucketImage:
        """Rewrite an item under new rules, keeping balances (cut to lower ceilings)."""
        for _ in range(MAX_ROUNDS):
            now = self.clock()
            states = {}
            for params in stamp.limits:
                old_params = image.stamp.params(params.name)
                old_state = image.states.get(params.name)
                if old_params is None or old_state is None:
                    states[params.name] = bucket.full_state(params, stamp.shards)
                else:
                    converted = bucket.convert(
                        old_params,
                        params,
                        old_state,
                        now,
                        image.stamp.shards,
                        stamp.shards,
                        since=image.written_at,
                    )
                    states[params.name] = converted
            item = self.item_for(
                image,
                stamp,
                image.stamp_seq + 1,
                states,
                now,
                admissions=image.admissions,
                generation=image.generation,
                evidence=image.evidence,  # every writer's evidence survives a restamp
            )
            request = items.put_request(
                self.store.table, item, replaces=image, expired_before_s=None
            )
            try:
                new = items.parse(await self.store.send_update(request))
            except ConditionFailed as failed:
                if failed.item is None:
                    raise RulesChanged() from None
                image = items.parse(failed.item)
                if image.stamp.same_rules(stamp) and not _newer(stamp, image.stamp):
                    return image
                continue
            except UnknownOutcome:
                continue  # the snapshot guard makes a resend safe
            self.images.put(new, now)
            return new
        raise RulesChanged()

    async def targets(
        self,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        override: Sequence[Limit] | None,
    ) -> list[ResourcePlan]:
        """The items an acquire writes, resource by resource (child, then cascade parent)."""
        now = self.clock()
        resources = list(requests)
        plans: dict[str, ResourcePlan] = {}
        slow: list[str] = []
        for resource in resources:
            target = self._cached_target(entity_id, resource, "entity", override, now)
            unmetered = self.resolver.cache.get(("unmetered", entity_id, resource), now)
            if target is not None:
                plans[resource] = ResourcePlan(resource, requests[resource], target, None)
            elif unmetered[0] and override is None:
                plans[resource] = ResourcePlan(resource, requests[resource], None, None)
            else:
                slow.append(resource)
        # Items known from earlier writes: learn of resource/system changes once per TTL.
        stale = [r for r in plans if plans[r].child and self.resolver.needs_refresh(r)]
        if stale:
            await self.resolver.refresh(stale)
            now = self.clock()
            for resource in stale:
                if self._cached_target(entity_id, resource, "entity", override, now) is None:
                    del plans[resource]
                    slow.append(resource)
        resolved_slow: dict[str, cfg.Resolved] = {}
        if slow:
            loaded = await self._load(entity_id, slow, "entity", override)
            for resource, (res, target) in loaded.items():
                resolved_slow[resource] = res
                if target is None:
                    self.resolver.cache.put(("unmetered", entity_id, resource), res, self.clock())
                plans[resource] = ResourcePlan(resource, requests[resource], target, None)
        # cascade parents
        parent_of: dict[str, str] = {}
        for resource, plan in plans.items():
            if plan.child is not None:
                if plan.child.stamp.cascade and plan.child.stamp.parent:
                    parent_of[resource] = plan.child.stamp.parent
            else:
                res = resolved_slow.get(resource) or self.resolver.cache.peek(
                    ("unmetered", entity_id, resource)
                )
                if res is not None and res.cascade and res.parent:
                    parent_of[resource] = res.parent
        need_parent: dict[str, list[str]] = {}
        now = self.clock()
        for resource, parent in parent_of.items():
            target = self._cached_target(parent, resource, "parent", None, now)
            if target is not None:
                plans[resource].parent = target
            else:
                need_parent.setdefault(parent, []).append(resource)
        for parent, parent_resources in need_parent.items():
            loaded = await self._load(parent, parent_resources, "parent", None)
            for resource, (_, target) in loaded.items():
                plans[resource].parent = target
        # amounts per item; unknown names; disabled flags (disabled outranks everything else)
        ordered = [plans[r] for r in resources]
        for plan in ordered:
            for target in (plan.child, plan.parent):
                if target is not None and target.stamp.is_disabled:
                    raise ResourceDisabled(target.entity_id, plan.resource, target.stamp.flag_level)
        for plan in ordered:
            if plan.child is not None:
                unknown = [n for n in plan.amounts if plan.child.stamp.params(n) is None]
                if unknown:
                    raise ValidationError(
                        "limit name",
                        unknown[0],
                        f"resource {plan.resource!r} declares {list(plan.child.stamp.names)} "
                        f"for {entity_id!r}; consume only those",
                    )
                plan.child.amounts = {n: a * MILLI for n, a in plan.amounts.items()}
            if plan.parent is not None:
                plan.parent.amounts = {
                    n: a * MILLI
                    for n, a in plan.amounts.items()
                    if plan.parent.stamp.params(n) is not None
                }
                if not plan.parent.amounts:
                    plan.parent = None
        return ordered

    # --- shards --------------------------------------------------------------------------------

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
        trial = replace(target, image=hit[0], read_now=True)
        return bool(target.amounts) and _plan_admit(trial, now) is None

    def _on_shard(self, target: Target) -> Target:
        """Spread load: a random shard, steered away from shards known to be short."""
        shards = target.stamp.shards
        if shards <= 1:
            return target
        now = self.clock()
        candidates = [s for s in range(shards) if not self._known_short(target, s, now)]
        shard = random.choice(candidates or list(range(shards)))
        if shard != target.image.shard:
            image, seen_at = self._shard_image(target.image, shard)
            target.image, target.seen_at, target.read_now = image, seen_at, False
            target.exists = True
        target.tried = {shard}
        return target

    def _try_another_shard(self, target: Target, now: int) -> bool:
        """After a shard refused: move to another, up to 3 tried (or all, if fewer), skipping
        shards the rejection cache knows are short."""
        shards = target.stamp.shards
        target.tried.add(target.image.shard)
        if shards <= 1 or len(target.tried) >= min(MIN_SHARDS_TRIED, shards):
            return False
        untried = [
            s
            for s in range(shards)
            if s not in target.tried and not self._known_short(target, s, now)
        ]
        if not untried:
            return False
        image, seen_at = self._shard_image(target.image, random.choice(untried))
        target.image, target.seen_at, target.read_now, target.exists = image, seen_at, False, True
        return True

    def _short_everywhere(self, target: Target, now: int) -> bool:
        """Whether what this process knows (within the rejection window) refuses the target,
        after moving a sharded target off shards known to be short."""
        while True:
            fresh = target.read_now or self.images.fresh_for_rejection(target.seen_at, now)
            if not fresh or _plan_admit(replace(target, read_now=True), now) is not None:
                return False
            if not self._try_another_shard(target, now):
                return True

    def _observe(self, image: BucketImage) -> None:
        """Estimate a shard's write rate from the images writes return; split when too hot."""
        key = ImageCache.key_of(image)
        first = self._rates.get(key)
        shards = image.stamp.shards
        if first is None or image.writes < first[0] or first[2] != shards:
            self._rates[key] = (image.writes, image.written_at, shards)  # since the last split
            return
        elapsed = image.written_at - first[1]
        if elapsed < self.rate_window_ms:
            return
        self._rates[key] = (image.writes, image.written_at, shards)
        rate = (image.writes - first[0]) * 1000 / elapsed
        if rate > self.split_threshold and image.stamp.shards < MAX_SHARDS:
            bucket_key = key[:3]
            if bucket_key not in self._splitting:
                self._splitting.add(bucket_key)
                task = asyncio.ensure_future(self._split_quietly(image))
                self._split_tasks.add(task)
                task.add_done_callback(self._split_tasks.discard)

    async def _split_quietly(self, image: BucketImage) -> None:
        try:
            await self.split(image.entity_id, image.resource, image.stamp.shards)
        except Exception as exc:  # a failed split is retried when the bucket is hot again
            log.warning("splitting %s/%s failed: %s", image.entity_id, image.resource, exc)
        finally:
            self._splitting.discard((image.ns, image.entity_id, image.resource))

    async def settle_splits(self) -> None:
        """Wait for splits started in the background (tests, shutdown)."""
        while self._split_tasks:
            await asyncio.gather(*list(self._split_tasks), return_exceptions=True)

    async def split(self, entity_id: str, resource: str, shards: int) -> int:
        """Double a bucket's shards from `shards`, in one transaction. Returns the new count."""
        keys_ = [keys.bucket(self.ns, entity_id, resource, s) for s in range(shards)]
        for _ in range(MAX_ROUNDS):
            found = {
                int(item["sh"]): items.parse(item)
                for item in await self.store.batch_get(keys_, consistent=True)
            }
            current = found.get(0)
            if current is None or current.stamp.shards != shards:
                return current.stamp.shards if current else shards
            now = self.clock()
            doubled = shards * 2
            operations: list[dict[str, Any]] = []
            for shard in range(shards):
                image = found.get(shard)
                if image is None:
                    image = _blank_image(
                        self.ns, entity_id, resource, current.stamp, current.stamp_seq, shard
                    )
                operations += self._split_operations(image, found.get(shard) is not None, now)
            try:
                await self.store.transact(operations, token=items.new_op_id())
            except DynamoError:
                continue  # a concurrent write changed a shard's stamp: read again
            self.images.forget(self.ns, entity_id, resource)
            log.info("split %s/%s into %d shards", entity_id, resource, doubled)
            return doubled
        return shards

    def _split_operations(self, image: BucketImage, exists: bool, now: int) -> list[dict[str, Any]]:
        shards = image.stamp.shards
        doubled = shards * 2
        old_writes: dict[str, LimitWrite] = {}
        sibling_states: dict[str, State] = {}
        for params in image.stamp.limits:
            state = image.states.get(params.name, bucket.full_state(params, shards))
            old_writes[params.name], sibling_states[params.name] = split_limit(
                params, state, now, shards
            )
        stamp = replace(image.stamp, shards=doubled)
        sibling = self.item_for(
            image, stamp, image.stamp_seq + 1, sibling_states, now, shard=image.shard + shards
        )
        sibling_op = {
            "Put": {
                "Item": sibling,
                "ConditionExpression": "attribute_not_exists(PK) OR #ttl < :now",
                "ExpressionAttributeNames": {"#ttl": "ttl"},
                "ExpressionAttributeValues": {":now": now // 1000},
            }
        }
        if not exists:
            states = {p.name: bucket.full_state(p, doubled) for p in stamp.limits}
            item = self.item_for(image, stamp, image.stamp_seq + 1, states, now)
            return [
                {"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}},
                sibling_op,
            ]
        request = items.update_request(
            self.store.table,
            image,
            old_writes,
            now=now,
            ttl=None,
            admissions=0,
            new_shards=doubled,
        )
        update = {
            "Key": {"PK": image.key["PK"], "SK": image.key["SK"]},
            "UpdateExpression": request["UpdateExpression"],
            "ConditionExpression": request["ConditionExpression"],
            "ExpressionAttributeNames": request["ExpressionAttributeNames"],
            "ExpressionAttributeValues": {
                k: codec.decode(v) for k, v in request["ExpressionAttributeValues"].items()
            },
        }
        return [{"Update": update}, sibling_op]

    # --- writing -----------------------------------------------------------------------------

    def _ttl(self, stamp: Stamp, states: dict[str, State], now: int) -> int | None:
        if self.ttl_multiplier <= 0 or not stamp.limits:
            return None
        horizon = 0
        for params in stamp.limits:
            state = states.get(params.name, State())
            if params.kind == bucket.Kind.RATE:
                refill = max(1, params.shard_refill(stamp.shards))
                span = params.shard_capacity(stamp.shards) * params.period_ms // refill
                span += max(0, state.v - now * refill) // refill
            else:
                nxt = params.next_reset_ms(now, state.w)
                span = (nxt - now) if nxt is not None else params.reset_after_ms
                if params.kind == bucket.Kind.SESSION and state.w is not None:
                    span = max(span, state.w + params.reset_after_ms - now)
            horizon = max(horizon, span)
        return (now + horizon * self.ttl_multiplier) // 1000 + 1

    async def send(
        self,
        image: BucketImage,
        exists: bool,
        writes: dict[str, LimitWrite],
        admissions: int,
        evidence: items.Evidence,
        now: int,
    ) -> BucketImage:
        """One bucket write for a lane: an update of `image`, or its creation."""
        states = dict(image.states)
        for name, write in writes.items():
            states[name] = write.result
        ttl = self._ttl(image.stamp, states, now)
        if exists:
            request = items.update_request(
                self.store.table,
                image,
                writes,
                now=now,
                ttl=ttl,
                admissions=admissions,
                evidence=evidence,
            )
        else:
            item = self.item_for(
                image,
                image.stamp,
                image.stamp_seq,
                states,
                now,
                admissions=max(0, admissions),
                evidence={evidence.writer: evidence.seq},
            )
            request = items.put_request(
                self.store.table, item, replaces=None, expired_before_s=now // 1000
            )
        return items.parse(await self.store.send_update(request))

    async def fence(
        self, image: BucketImage, evidence: items.Evidence, blocked: int
    ) -> BucketImage:
        """A lane's fence after a lost answer (lanes.Lanes)."""
        request = items.fence_request(self.store.table, image.key, evidence, blocked)
        return items.parse(await self.store.send_update(request))

    def _on_image(self, image: BucketImage) -> None:
        self.images.put(image, self.clock())
        self._observe(image)

    def _blank_after(self, image: BucketImage) -> BucketImage:
        return _blank_image(
            self.ns,
            image.entity_id,
            image.resource,
            image.stamp,
            image.stamp_seq + 1,
            image.shard,
        )

    async def write_all(
        self, jobs: list[tuple[Target, Planner]], *, settle: bool
    ) -> tuple[
        list[tuple[Target, BucketImage, dict[str, LimitWrite]]], list[Target], BaseException | None
    ]:
        """Write every job through its item's lane until each lands or is refused.

        A planner maps (target with its latest image, now) to the limit writes and admissions
        delta, or None when a fresh image shows the request cannot be admitted. When several
        jobs are written and one refuses on the images at hand, nothing is sent. Returns
        (landed, refused, error). With `settle` (exit writes and refunds, which never refuse),
        transient failures are retried longer.
        """
        landed: list[tuple[Target, BucketImage, dict[str, LimitWrite]]] = []
        refused: list[Target] = []
        error: BaseException | None = None
        rounds = SETTLE_ROUNDS if settle else MAX_ROUNDS
        if len(jobs) > 1 and not settle:
            now = self.clock()
            for job, planner in jobs:
                while planner(job, now) is None:
                    if not self._try_another_shard(job, now):
                        refused.append(job)
                        break
            if refused:
                return landed, refused, error
        pending: list[tuple[Target, Planner]] = list(jobs)
        while pending:
            outcomes = await _settle_all(
                [
                    self.lanes.write(target, planner, settle=settle, rounds=rounds)
                    for target, planner in pending
                ]
            )
            retry: list[tuple[Target, Planner]] = []
            for (_, planner), outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    error = error or outcome
                    continue
                target = cast(Target, outcome.target)
                if outcome.image is not None:
                    landed.append((target, outcome.image, outcome.writes))
                elif outcome.refused:
                    if self._try_another_shard(target, self.clock()):
                        retry.append((target, planner))
                    else:
                        refused.append(target)
                else:
                    error = error or _lane_error(outcome.error)
            pending = retry
        return landed, refused, error

    def _latest(self, target: Target) -> Target:
        cached = self.images.get(ImageCache.key_of(target.image))
        if cached is not None and cached[0].stamp_seq >= target.image.stamp_seq:
            target.image = cached[0]
            target.exists = True
        return target

    def _landed(
        self, target: Target, image: BucketImage, writes: dict[str, LimitWrite], admissions: int
    ) -> Landed:
        periods = {name: w.result.w for name, w in writes.items()}
        return Landed(
            target=replace(target, image=image, exists=True),
            debited={name: target.amounts[name] for name in writes},
            periods=periods,
            admissions=admissions,
            bypass=target.stamp.is_bypass,
        )

    async def debit(
        self, targets: list[Target], *, local_ok: bool, admissions: int = 1
    ) -> list[Landed]:
        """Admit and debit every target together, or none: raises RateLimitExceeded.

        `local_ok`: images seen within the rejection cache's window may refuse without a call.
        """
        now = self.clock()
        if local_ok:
            short = [t for t in targets if self._short_everywhere(t, now)]
            if short:
                if not any(t.read_now for t in short):
                    self.images.local_rejections += 1
                raise self.rejection(targets, now)
        planner = _admit_planner(admissions)
        landed_raw, refused, error = await self.write_all(
            [(t, planner) for t in targets], settle=False
        )
        landed = [self._landed(t, img, w, admissions) for t, img, w in landed_raw]
        if refused or error is not None:
            if landed:
                await self.refund(landed)
            if isinstance(error, _Contended) or (error is None and not refused):
                raise RateLimitExceeded(self.statuses(targets, self.clock()), contended=True)
            if refused:
                raise self.rejection(targets, self.clock())
            assert error is not None
            raise error
        return landed

    def rejection(self, targets: list[Target], now: int) -> RateLimitExceeded:
        statuses = self.statuses(targets, now)
        if not any(s.exceeded for s in statuses):
            return RateLimitExceeded(statuses, contended=True)
        return RateLimitExceeded(statuses)

    def statuses(self, targets: list[Target], now: int) -> list[LimitStatus]:
        out: list[LimitStatus] = []
        for target in targets:
            out += limit_statuses(target.image, target.amounts, now, bypass=target.stamp.is_bypass)
        return out

    async def refund(self, landed: list[Landed]) -> None:
        """Give back everything `landed` debited, exactly once, never above a ceiling."""
        jobs: list[tuple[Target, Planner]] = [
            (self._latest(entry.target), _credit_planner(entry))
            for entry in landed
            if entry.debited or entry.admissions
        ]
        if not jobs:
            return
        _, _, error = await self.write_all(jobs, settle=True)
        if error is not None:
            raise error
        for entry in landed:
            entry.debited = {}
            entry.admissions = 0

    async def apply_adjustments(self, changes: list[tuple[Landed, dict[str, int]]]) -> None:
        """Write net adjustments (milli, signed) to landed items: never rejects."""
        jobs: list[tuple[Target, Planner]] = [
            (self._latest(entry.target), _adjust_planner(entry, delta)) for entry, delta in changes
        ]
        if not jobs:
            return
        _, _, error = await self.write_all(jobs, settle=True)
        if error is not None:
            raise error

    # --- notes ---------------------------------------------------------------------------------

    def _note_unmetered(self, resource: str) -> None:
        if resource not in self._warned_unmetered:
            self._warned_unmetered.add(resource)
            log.warning(
                "resource %r has no limits at any level in namespace %s: it is unmetered "
                "(admitted, nothing written)",
                resource,
                self.ns,
            )

    def _note_parent_fallback(self, parent: str, resource: str) -> None:
        if (parent, resource) not in self._warned_parent_fallback:
            self._warned_parent_fallback.add((parent, resource))
            log.warning(
                "cascade parent %r has no limits of its own for %r: it is judged on the "
                "resource or system defaults (one user's allowance); set its own limits",
                parent,
                resource,
            )


class _Contended(Exception):
    pass


def _lane_error(error: BaseException | None) -> BaseException:
    """A lane's reason for giving up, as `write_all` reports it."""
    if isinstance(error, lanes.Contended):
        return _Contended()
    if isinstance(error, lanes.RulesChangedSignal):
        return RulesChanged()
    if isinstance(error, DynamoError):
        return Unavailable(error)
    assert error is not None
    return error


# --- planners (pure) ---------------------------------------------------------------------------


def _plan_admit(target: Target, now: int) -> tuple[dict[str, LimitWrite], int] | None:
    """Debit the target's amounts. Refuses (None) only on an image read in this call."""
    image = target.image
    writes: dict[str, LimitWrite] = {}
    for name, amount in target.amounts.items():
        params = image.stamp.params(name)
        assert params is not None
        state = image.states.get(name, bucket.full_state(params, image.stamp.shards))
        if image.stamp.is_bypass:
            writes[name] = bucket.plan_count_only(state, amount)
            continue
        enforce = not params.soft
        write = bucket.plan_debit(
            params,
            state,
            now,
            image.stamp.shards,
            amount,
            enforce=enforce,
            check=target.read_now,
        )
        if write is None:
            return None
        writes[name] = write
    return writes, 1


def _admit_planner(admissions: int) -> Planner:
    def plan(target: Target, now: int) -> tuple[dict[str, LimitWrite], int] | None:
        result = _plan_admit(target, now)
        return None if result is None else (result[0], admissions)

    return plan


def _credit_planner(
    entry: Landed,
) -> Callable[[Target, int], tuple[dict[str, LimitWrite], int]]:
    def plan(target: Target, now: int) -> tuple[dict[str, LimitWrite], int]:
        image = target.image
        writes: dict[str, LimitWrite] = {}
        for name, amount in entry.debited.items():
            params = image.stamp.params(name)
            state = image.states.get(name)
            if params is None or state is None or amount == 0:
                continue
            if entry.bypass:
                writes[name] = bucket.plan_count_only(state, -amount)
            elif amount > 0:
                writes[name] = bucket.plan_credit(
                    params, state, now, image.stamp.shards, amount, entry.periods.get(name)
                )
            else:
                writes[name] = _force(params, state, now, image.stamp.shards, -amount)
        return writes, -entry.admissions

    return plan


def _adjust_planner(
    entry: Landed, delta: dict[str, int]
) -> Callable[[Target, int], tuple[dict[str, LimitWrite], int]]:
    def plan(target: Target, now: int) -> tuple[dict[str, LimitWrite], int]:
        image = target.image
        writes: dict[str, LimitWrite] = {}
        for name, amount in delta.items():
            params = image.stamp.params(name)
            state = image.states.get(name)
            if params is None or state is None or amount == 0:
                continue
            if entry.bypass:
                writes[name] = bucket.plan_count_only(state, amount)
            elif amount > 0:
                writes[name] = _force(params, state, now, image.stamp.shards, amount)
            else:
                writes[name] = bucket.plan_credit(
                    params, state, now, image.stamp.shards, -amount, entry.periods.get(name)
                )
        return writes, 0

    return plan


def _force(params: Params, state: State, now: int, shards: int, amount: int) -> LimitWrite:
    write = bucket.plan_debit(params, state, now, shards, amount, enforce=False)
    assert write is not None
    return write


# --- statuses ----------------------------------------------------------------------------------


def limit_statuses(
    image: BucketImage, amounts: dict[str, int], now: int, *, bypass: bool = False
) -> list[LimitStatus]:
    """A status for every declared limit of an item, judged on its balance at `now`."""
    out = []
    shards = image.stamp.shards
    for params in image.stamp.limits:
        state = image.states.get(params.name, bucket.full_state(params, shards))
        view = bucket.view(params, state, now, shards)
        requested = amounts.get(params.name, 0)
        exceeded = (
            not bypass and not params.soft and params.name in amounts and view.balance < requested
        )
        wait = bucket.retry_after_ms(params, state, now, shards, requested) if exceeded else 0
        out.append(
            LimitStatus(
                entity_id=image.entity_id,
                resource=image.resource,
                limit_name=params.name,
                limit=cfg.from_params(params),
                available=view.balance // MILLI,
                requested=requested // MILLI,
                exceeded=exceeded,
                retry_after_seconds=wait / 1000,
                resets_at_ms=params.next_reset_ms(now, state.w),
                max_request=view.ceiling // MILLI,
            )
        )
    return out


# --- helpers -----------------------------------------------------------------------------------


def _windows_moved(image: BucketImage, now: int) -> bool:
    """A limit's schedule window changed since the item's last write (even and back again)."""
    return any(
        p.in_window(now) is not p or bucket.window_passed(p, image.written_at, now)
        for p in image.stamp.limits
    )


async def _settle_all(calls: list[Coroutine[Any, Any, _T]]) -> list[_T | BaseException]:
    """Each call's result or exception, like gather(return_exceptions=True).

    A single call (the warm single-resource path) is awaited in place: no task, no extra loop turn.
    """
    if len(calls) == 1:
        try:
            return [await calls[0]]
        except Exception as exc:
            return [exc]
    return list(await asyncio.gather(*calls, return_exceptions=True))


def _blank_image(
    ns: str, entity_id: str, resource: str, stamp: Stamp, seq: int, shard: int = 0
) -> BucketImage:
    return BucketImage(
        ns=ns,
        entity_id=entity_id,
        resource=resource,
        shard=shard,
        stamp=stamp,
        stamp_seq=seq,
        states={p.name: bucket.full_state(p, stamp.shards) for p in stamp.limits},
    )


def _versions(stamp: Stamp) -> tuple[int, int, int]:
    return (stamp.entity_version, stamp.resource_version, stamp.system_version)


def _newer(a: Stamp, b: Stamp) -> bool:
    """Some version in `a` is ahead of `b`'s."""
    return any(x > y for x, y in zip(_versions(a), _versions(b), strict=True))


def _newer_or_same(a: Stamp, b: Stamp) -> bool:
    return all(x >= y for x, y in zip(_versions(a), _versions(b), strict=True))


def _rules_matter(planned: Stamp, current: Stamp) -> bool:
    """Whether a stamp change invalidates the set of items the call chose."""
    return (
        planned.parent != current.parent
        or planned.cascade != current.cascade
        or planned.disabled != current.disabled
        or planned.names != current.names
    )
