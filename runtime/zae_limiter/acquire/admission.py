"""`Admission`: debit the targets of an acquire together, credit them back, split hot buckets.

Composes the steps of the acquire path for one namespace scope: `TargetFinder` (which items),
`ShardChooser` and `SplitDetector` (which shard, when to split), `Waves` (the writes). Every
write is guarded by the item's stamp sequence; a write that meets a newer stamp, or a concurrent
writer's effect, fails its condition, gets the current item back and is planned again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from ..caches import ImageCache
from ..core import regions
from ..core.evolve import evolve
from ..core.images import BucketImage, Stamp
from ..core.regions import Regional
from ..errors import RateLimitExceeded
from ..limits import Limit
from ..models import LimitStatus
from ..resolution import Resolver
from . import lane_load, planning
from .bucket_io import BucketIO
from .deadlines import Backoff
from .hold_watch import HoldWatch
from .load import Load
from .pending import Pending
from .renewals import Renewals
from .shards import SPLIT_WRITES_PER_SECOND, ShardChooser, SplitDetector
from .targets import Loaded, TargetFinder
from .values import (
    AnswerLost,
    Contended,
    Landed,
    Overloaded,
    Planner,
    ResourcePlan,
    RulesChanged,
    Target,
    Unavailable,
)
from .waves import MoreOperations, WaveResult, Waves, Written

log = logging.getLogger("zae_limiter")
#: While the table is paced, a call's turn must come within this share of the time its
#: deadline leaves after its writes' estimated waits.
TURN_SHARE = 0.5


class Admission:
    """Bucket writes for one namespace scope."""

    def __init__(
        self,
        bucket_io: BucketIO,
        ns: str,
        resolver: Resolver,
        images: ImageCache,
        clock: Callable[[], int],
        ttl_multiplier: int,
        split_writes_per_second: float = SPLIT_WRITES_PER_SECOND,
        pending: Pending | None = None,
        backoff: Backoff | None = None,
        regional: Regional | None = None,
        load: Load | None = None,
    ) -> None:
        self.ns = ns
        self.pending = pending if pending is not None else Pending()
        self.backoff = backoff if backoff is not None else Backoff()
        self.images = images
        self.clock = clock
        self.maker = planning.ItemMaker(ns, ttl_multiplier)
        self.shards = ShardChooser(ns, images, clock, regional)
        self.regional = regional
        self.detector = SplitDetector(split_writes_per_second)
        self.waves = Waves(
            bucket_io,
            images,
            clock,
            self.maker,
            self.shards,
            on_written=self._observe,
            backoff=backoff,
            load=load,
        )
        #: the writer's requests in flight and its overload counters (acquire/load.py)
        self.traffic = self.waves.lanes.load
        self.waves.on_orphan = self._orphaned
        self.waves.lanes.on_leave = lambda write: self.pending.adopt(write, None)
        self.finder = TargetFinder(
            bucket_io, ns, resolver, images, clock, self.shards, self.waves.restamp
        )
        #: this process's concurrency holds (the lanes' writer's), renewed while held
        self.ledger = self.waves.lanes.ledger
        self.renewals = Renewals(self.waves.lanes, images, clock)
        #: leases that asked to be told at once when a hold of theirs is lost
        self.hold_watch = HoldWatch(self.ledger, clock)
        self._splitting: set[tuple[str, str, str]] = set()
        self._split_tasks: set[asyncio.Future[None]] = set()

    # --- the items -------------------------------------------------------------------------------

    async def targets(
        self,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        override: Sequence[Limit] | None,
    ) -> list[ResourcePlan]:
        """The items an acquire writes, resource by resource (child, then cascade parent)."""
        return await self.finder.targets(entity_id, requests, override)

    async def load(
        self, entity_id: str, resources: Sequence[str], role: str, override: Sequence[Limit] | None
    ) -> Loaded:
        """Read one entity's config and items (restamped where needed)."""
        return await self.finder.load(entity_id, resources, role, override)

    async def restamp(self, image: BucketImage, stamp: Stamp) -> BucketImage:
        """Rewrite an item under new rules, keeping balances (cut to lower ceilings)."""
        return await self.waves.restamp(image, stamp)

    # --- debits and credits ----------------------------------------------------------------------

    async def debit(
        self,
        targets: list[Target],
        *,
        local_ok: bool,
        admissions: int = 1,
        deadline: float | None = None,
    ) -> list[Landed]:
        """Admit and debit every target together, or none: raises RateLimitExceeded.

        `local_ok`: images seen within the rejection cache's lifetime may refuse without a call,
        counting what this writer's debits in flight on the items take. `deadline`
        (ms of `traffic.clock`): a call that cannot be decided before it is refused at once
        (`Overloaded`), nothing sent; a call the images refuse is refused (429) first, however
        near it is.
        """
        now = self.clock()
        if local_ok:
            checked = [self.shards.short_everywhere(t, now) for t in targets]
            targets = [target for _, target in checked]
            short = [target for is_short, target in checked if is_short]
            lanes = self.waves.lanes  # no lane, no turn: nothing of this writer's in flight
            busy = lanes.by_item or lanes.sending
            judged = targets if short or not busy else self._with_reserved(targets, now)
            if judged is not targets:
                short = [j for t, j in zip(targets, judged, strict=True) if j is not t]
                short = [t for t in short if planning.refused_on_image(t, now)]
            if short:
                if not any(t.read_now for t in short):
                    self.images.local_rejections += 1
                raise self.rejection(judged, now)
        traffic = self.traffic
        # From here its debits count against the items' images until each is in its lane
        # (`lane_load.reserved`); one target unpaced goes into its lane before anything yields.
        coming = len(targets) > 1 or traffic.rate is not None
        if coming:
            lane_load.sending(self.waves.lanes, targets)
        try:
            if (deadline is not None and traffic.inflight) or traffic.rate is not None:
                await self._take_turn(targets, deadline, now)
            planner = planning.admit_planner(admissions, self.ledger)
            result = await self._write(targets, planner, deadline, now)
        finally:
            if coming:
                lane_load.not_sent(self.waves.lanes, targets)
        landed = [_landed(w, admissions) for w in result.written]
        if any(entry.held for entry in landed):
            self.renewals.start()
        if not result.refused and result.error is None:
            return landed
        if landed:
            failed = await self._give_back(landed)
            if failed is not None:
                # A debit landed and its refund did not: say so, never "nothing was debited".
                log.error("a refund after a failed admission could not land: %s", failed)
                raise AnswerLost(failed) from failed
        if isinstance(result.error, Unavailable) and result.error.maybe_landed:
            raise result.error  # an undecided write may have landed: never "refused" (a 429)
        if isinstance(result.error, Contended):  # contended only if the item as found admits it
            raise self.rejection(result.latest, self.clock())
        if result.refused:
            judged_at = result.refused_at if result.refused_at is not None else self.clock()
            raise self.rejection(result.latest, judged_at)
        assert result.error is not None
        raise result.error

    def _write(
        self, targets: list[Target], planner: Planner, deadline: float | None, now: int
    ) -> Awaitable[WaveResult]:
        """The call's writes, all in one round trip (awaited by the caller: the warm path
        starts no coroutine of its own here); but see `_suspects_first`."""
        cache_on = self.images.rejection_ttl_ms > 0  # off: nothing seen decides a refusal
        suspects = self._stale_short(targets, now) if cache_on and len(targets) > 1 else None
        if suspects and len(suspects) < len(targets):
            return self._suspects_first(targets, suspects, planner, deadline)
        jobs = [(target, planner) for target in targets]
        return self.waves.write_all(jobs, settle=False, deadline=deadline)

    async def _suspects_first(
        self, targets: list[Target], suspects: list[int], planner: Planner, deadline: float | None
    ) -> WaveResult:
        """The call's writes when this process's image of some of its items (`suspects`), too
        old to refuse on (the rejection cache's lifetime), still shows them short: their writes
        go first and the others only once they landed. A call they refuse then costs one write,
        not one per item and their refunds: an exhausted hot organisation is found so again each
        lifetime, by every call of its users waiting on it then. (All the call's writes go in
        one round trip otherwise, `debit`.)"""
        jobs = [(target, planner) for target in targets]
        latest = list(targets)
        first = await self.waves.write_all(
            [jobs[i] for i in suspects], settle=False, deadline=deadline
        )
        for index, target in zip(suspects, first.latest, strict=True):
            latest[index] = target
        if first.refused or first.error is not None:
            return replace(first, latest=latest)
        others = [i for i in range(len(targets)) if i not in suspects]
        rest = await self.waves.write_all(
            [jobs[i] for i in others], settle=False, deadline=deadline
        )
        for index, target in zip(others, rest.latest, strict=True):
            latest[index] = target
        written = first.written + rest.written
        return WaveResult(written, rest.refused, rest.error, latest, rest.refused_at)

    def _stale_short(self, targets: list[Target], now: int) -> list[int]:
        """Positions of the unsharded targets whose image is too old to refuse on but shows
        them short."""
        images = self.images
        return [
            index
            for index, t in enumerate(targets)
            if not (t.read_now or images.fresh_for_rejection(t.seen_at, now))
            and t.stamp.shards == 1
            and planning.refused_on_image(t, now)
        ]

    def _with_reserved(self, targets: list[Target], now: int) -> list[Target]:
        """`targets`, each unsharded one this process has a fresh image of and debits in flight
        on, judged on that image less those debits (`targets` itself when none is)."""
        lanes = self.waves.lanes
        judged = targets
        for index, target in enumerate(targets):
            reserved = lane_load.reserved(lanes, ImageCache.key_of(target.image))
            if reserved is None or target.stamp.shards != 1:
                continue
            if target.read_now or self.images.fresh_for_rejection(target.seen_at, now):
                if judged is targets:
                    judged = list(targets)
                judged[index] = planning.with_reserved(target, reserved, now)
        return judged

    async def _take_turn(self, targets: list[Target], deadline: float | None, now: int) -> None:
        """Wait for the call's turn (`_turn`); a call that cannot be decided in time is refused
        when an image refuses it (`_refusal_when_shed`), else raises `Overloaded`."""
        try:
            await self._turn(targets, deadline)
        except Overloaded:
            refusal = self._refusal_when_shed(targets, now)
            if refusal is None:
                raise
            raise refusal from None

    async def _turn(self, targets: list[Target], deadline: float | None) -> None:
        """Raise `Overloaded` when the call's writes would be answered after `deadline` (the
        wait for request slots, the slowest of its items' lanes, and while the table is paced
        its turn, taken for the writes it adds: an item with a lane goes out folded into its
        next write); else wait for its turn. A call of an idle writer is not refused on its
        measured round trips: its answer measures the table again."""
        traffic = self.traffic
        lanes = self.waves.lanes
        now = traffic.now_ms()
        keys = [ImageCache.key_of(t.image) for t in targets]
        wait = traffic.wait_ms(len(targets)) + max(lane_load.wait_ms(lanes, k, now) for k in keys)
        # a turn must leave half of what remains as margin (a throttle's retry, the loop's lag)
        latest = None if deadline is None else now + (deadline - now - wait) * TURN_SHARE
        if deadline is not None and now + wait > deadline and traffic.inflight:
            raise Overloaded(wait, deadline - now)
        writes = sum(1 for key in keys if key not in lanes.by_item) or 1
        delay = traffic.turn(writes, now, latest)
        if delay > 0:
            await self.backoff.pause(delay / 1000)

    def _refusal_when_shed(self, targets: list[Target], now: int) -> RateLimitExceeded | None:
        """A call that cannot be decided in time is refused (429) when the image a write
        returned for one of its items, however old, still refuses it: the limit is the reason
        as far as this writer knows, the call would not be admitted either way, and its caller
        must hear "rate limited", not "unavailable". None: it is shed (`Overloaded`), counted."""
        if any(t.stamp.shards == 1 and planning.refused_on_image(t, now) for t in targets):
            self.images.local_rejections += 1
            return self.rejection(targets, now)
        self.traffic.shed += 1
        return None

    def rejection(self, targets: list[Target], now: int) -> RateLimitExceeded:
        received = self.clock()  # every image here arrived by now (`now` may be earlier: the
        for target in targets:  # time a refused write was planned); each is a sighting
            planning.note_sightings(target.image, self.ledger, received)
        statuses = self.statuses(targets, now)
        if not any(s.exceeded for s in statuses):
            return RateLimitExceeded(statuses, contended=True)
        return RateLimitExceeded(statuses)

    def statuses(self, targets: list[Target], now: int) -> list[LimitStatus]:
        return planning.target_statuses(targets, now, self.ledger)

    async def refund(
        self, landed: list[Landed], *, revoking: bool = False, fold: bool = False
    ) -> None:
        """Give back everything `landed` debited, exactly once, never above a ceiling.

        `revoking`: the debits were never kept (their call was refused or its caller left), so
        the refund writes say which writes they undo, and threshold alerts drop what those
        debits crossed (docs/alerts.md). `fold`: each refund waits briefly for its item's next
        write and goes out in it."""
        entries = [entry for entry in landed if entry.debited or entry.admissions]
        if not entries:
            return
        jobs: list[tuple[Target, Planner]] = [
            (self._latest(entry.target), planning.credit_planner(entry, self.ledger))
            for entry in entries
        ]
        revokes = [entry.seq for entry in entries] if revoking else None
        await self._settle(jobs, revokes, fold=fold)
        for entry in landed:
            entry.debited = {}
            entry.admissions = 0

    async def _give_back(self, landed: list[Landed]) -> BaseException | None:
        """Refund a refused admission's landed debits, each on its own; the first failure, or
        None. A refund is never given up while the process lives (the lanes wait out outages),
        so a failure is an undecided write or a closed repository."""
        outcomes = await asyncio.gather(
            *(self.refund([entry], revoking=True) for entry in landed), return_exceptions=True
        )
        first: BaseException | None = None
        for outcome in outcomes:
            if outcome is None:
                continue
            if not isinstance(outcome, Unavailable):
                raise outcome
            first = first or outcome
        return first

    async def refund_for_departed(self, landed: list[Landed]) -> None:
        """`refund` for a caller that stopped waiting: counted, and logged with the item keys
        (one WARNING per interval with the count per item: `pending.refund_log`)."""
        entries = [entry for entry in landed if entry.debited or entry.admissions]
        if not entries:
            return
        await self.refund(entries, revoking=True, fold=True)
        for entry in entries:
            self.pending.refunded_after_deadline += 1
            self.pending.refund_log.refunded(entry.target.image)

    def _orphaned(self, written: Written, admissions: int) -> None:
        """A lane's write landed for a caller that had left: refund it off the path."""
        refund = asyncio.ensure_future(self.refund_for_departed([_landed(written, admissions)]))
        self.pending.adopt(refund, None, counted=False)

    async def apply_adjustments(self, changes: list[tuple[Landed, dict[str, int]]]) -> None:
        """Write net adjustments (milli, signed) to landed items: never rejects."""
        jobs: list[tuple[Target, Planner]] = [
            (self._latest(entry.target), planning.adjust_planner(entry, delta, self.ledger))
            for entry, delta in changes
        ]
        if jobs:
            await self._settle(jobs)

    async def _settle(
        self,
        jobs: list[tuple[Target, Planner]],
        revokes: list[int | None] | None = None,
        *,
        fold: bool = False,
    ) -> None:
        result = await self.waves.write_all(jobs, settle=True, revokes=revokes, fold=fold)
        if isinstance(result.error, RulesChanged):  # (internal: never let out of the path)
            raise Unavailable(RulesChanged("the item's rules kept changing under the write"))
        if result.error is not None:  # undecided, or the repository closed
            raise result.error

    def _latest(self, target: Target) -> Target:
        """The target on the newest image this process has of its item."""
        cached = self.images.get(ImageCache.key_of(target.image))
        if cached is not None and cached[0].stamp_seq >= target.image.stamp_seq:
            return replace(target, image=cached[0], exists=True)
        return target

    # --- splitting hot buckets -------------------------------------------------------------------

    @property
    def rate_span_ms(self) -> int:
        """The span over which a shard's write rate is measured."""
        return self.detector.span_ms

    @rate_span_ms.setter
    def rate_span_ms(self, value: int) -> None:
        self.detector.span_ms = value

    def _observe(self, image: BucketImage) -> None:
        """After a write landed: split its bucket in the background when too hot, or when
        another Region writes it too (regional shards, docs/multi-region.md)."""
        regional = self.regional is not None and self._shared_by_regions(image)
        if not (regional or self.detector.too_hot(image)):
            return
        bucket_key = (image.ns, image.entity_id, image.resource)
        if bucket_key in self._splitting:
            return
        self._splitting.add(bucket_key)
        task = asyncio.ensure_future(self._split_quietly(image))
        self._split_tasks.add(task)
        task.add_done_callback(self._split_tasks.discard)

    def _shared_by_regions(self, image: BucketImage) -> bool:
        """A bucket with fewer shards than Regions that another Region wrote lately."""
        regional = self.regional
        if regional is None or self.shards.is_regional(image.stamp.shards):
            return False
        return regions.contested(image.evidence, regional.region, self.clock())

    async def _split_quietly(self, image: BucketImage) -> None:
        try:
            await self.split(image.entity_id, image.resource, image.stamp.shards)
        except Exception as exc:  # a failed split is retried when the bucket is hot again
            log.warning("splitting %s/%s failed: %s", image.entity_id, image.resource, exc)
        finally:
            self._splitting.discard((image.ns, image.entity_id, image.resource))

    async def split(
        self, entity_id: str, resource: str, shards: int, extra: MoreOperations | None = None
    ) -> int:
        """Double a bucket's shards from `shards`, in one transaction. Returns the new count
        (the current one when the bucket is absent or no longer has `shards`). `extra(doubled)`:
        more operations for the same transaction (an audit event)."""
        return await self.waves.split(entity_id, resource, shards, extra)

    async def create(self, target: Target) -> BucketImage:
        """Write a bucket item that does not exist yet, at its full allowance (pre-splitting).
        Raises ItemChanged if one exists."""
        return await self.waves.create(target)

    async def settle_splits(self) -> None:
        """Wait for splits started in the background (tests, shutdown)."""
        while self._split_tasks:
            await asyncio.gather(*list(self._split_tasks), return_exceptions=True)


def _landed(written: Written, admissions: int) -> Landed:
    target = written.target
    return Landed(
        target=evolve(target, image=written.image, exists=True),
        debited={name: target.amounts[name] for name in written.writes},
        periods={name: w.result.w for name, w in written.writes.items()},
        admissions=admissions,
        bypass=target.stamp.is_bypass,
        held={n: w.holds.key for n, w in written.writes.items() if w.holds and w.holds.key},
        seq=written.seq,
    )
