"""`Admission`: debit the targets of an acquire together, credit them back, split hot buckets.

Composes the steps of the acquire path for one namespace scope: `TargetFinder` (which items),
`ShardChooser` and `SplitDetector` (which shard, when to split), `Waves` (the writes). Every
write is guarded by the item's stamp sequence; a write that meets a newer stamp, or a concurrent
writer's effect, fails its condition, gets the current item back and is planned again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
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
from . import planning
from .bucket_io import BucketIO
from .deadlines import Backoff
from .dynamo_bucket_io import DynamoError, lowered, lowering
from .hold_watch import HoldWatch
from .pending import Pending
from .renewals import Renewals
from .shards import SPLIT_WRITES_PER_SECOND, ShardChooser, SplitDetector
from .targets import Loaded, TargetFinder
from .values import (
    AnswerLost,
    Contended,
    Landed,
    Planner,
    ResourcePlan,
    Target,
    Unavailable,
)
from .waves import MoreOperations, Waves, Written

log = logging.getLogger("zae_limiter")


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
        )
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
        try:  # config reads go to DynamoDB beside the bucket writes (not `with lowered:`: 2 calls)
            return await self.finder.targets(entity_id, requests, override)
        except DynamoError as error:
            raise lowering(error) from error

    async def load(
        self, entity_id: str, resources: Sequence[str], role: str, override: Sequence[Limit] | None
    ) -> Loaded:
        """Read one entity's config and items (restamped where needed)."""
        with lowered:
            return await self.finder.load(entity_id, resources, role, override)

    async def restamp(self, image: BucketImage, stamp: Stamp) -> BucketImage:
        """Rewrite an item under new rules, keeping balances (cut to lower ceilings)."""
        return await self.waves.restamp(image, stamp)

    # --- debits and credits ----------------------------------------------------------------------

    async def debit(
        self, targets: list[Target], *, local_ok: bool, admissions: int = 1
    ) -> list[Landed]:
        """Admit and debit every target together, or none: raises RateLimitExceeded.

        `local_ok`: images seen within the rejection cache's lifetime may refuse without a call.
        """
        now = self.clock()
        if local_ok:
            checked = [self.shards.short_everywhere(t, now) for t in targets]
            targets = [target for _, target in checked]
            short = [target for is_short, target in checked if is_short]
            if short:
                if not any(t.read_now for t in short):
                    self.images.local_rejections += 1
                raise self.rejection(targets, now)
        planner = planning.admit_planner(admissions, self.ledger)
        result = await self.waves.write_all([(t, planner) for t in targets], settle=False)
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
        if isinstance(result.error, Contended):  # contended only if the item as found admits it
            raise self.rejection(result.latest, self.clock())
        if result.refused:
            judged_at = result.refused_at if result.refused_at is not None else self.clock()
            raise self.rejection(result.latest, judged_at)
        assert result.error is not None
        raise result.error

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

    async def refund(self, landed: list[Landed], *, revoking: bool = False) -> None:
        """Give back everything `landed` debited, exactly once, never above a ceiling.

        `revoking`: the debits were never kept (their call was refused or its caller left), so
        the refund writes say which writes they undo, and threshold alerts drop what those
        debits crossed (docs/alerts.md)."""
        entries = [entry for entry in landed if entry.debited or entry.admissions]
        if not entries:
            return
        jobs: list[tuple[Target, Planner]] = [
            (self._latest(entry.target), planning.credit_planner(entry, self.ledger))
            for entry in entries
        ]
        revokes = [entry.seq for entry in entries] if revoking else None
        await self._settle(jobs, revokes)
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
        await self.refund(entries, revoking=True)
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
        self, jobs: list[tuple[Target, Planner]], revokes: list[int | None] | None = None
    ) -> None:
        result = await self.waves.write_all(jobs, settle=True, revokes=revokes)
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
