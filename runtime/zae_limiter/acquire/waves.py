"""Waves: the only code of the acquire path that sends bucket writes and reads their outcome.

`write_all` sends every job through its item's lane (`lanes.Lanes`: one write in flight per item
per writer, concurrent calls folded into it, writer evidence deciding lost answers exactly; see
docs/on-unavailable.md). A job ends landed (the item after its write), refused (its planner
refused on a fresh image: another shard is tried), or failed (`Contended`, `RulesChanged`,
`Unavailable`). Restamps and splits are sent here too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..caches import ImageCache
from ..core.bucket import LimitWrite
from ..core.images import BucketImage, Evidence, Stamp, new_op_id, new_writer_id
from ..core.shard_split import too_small_to_double
from . import lane_load, planning
from . import lanes as lanes_
from .bucket_io import BucketIO
from .deadlines import Backoff
from .lane_calls import Call, Outcome
from .load import Load
from .shards import ShardChooser, split_parts
from .split_items import SETTLE_AFTER_MS
from .transfers import SETTLE_AFTER_MS as TRANSFER_SETTLE_AFTER_MS
from .transfers import Transfers
from .values import (
    AnswerLost,
    ItemChanged,
    Planner,
    RulesChanged,
    ShardGone,
    Target,
    Unavailable,
)

log = logging.getLogger("zae_limiter")
_T = TypeVar("_T")

MAX_ROUNDS = 5  # condition failures per call before a contended rejection
#: More operations for a split's transaction, given the new shard count (an audit event).
MoreOperations = Callable[[int], Coroutine[Any, Any, list[dict[str, Any]]]]
SETTLE_ROUNDS = 8  # attempts for exit writes and refunds


@dataclass(frozen=True)
class Written:
    """One job's write that landed: the target as written, the item after it, its changes."""

    target: Target
    image: BucketImage
    writes: dict[str, LimitWrite]
    seq: int | None = None  # the sequence of the write that landed (its writer's evidence)


@dataclass(frozen=True)
class WaveResult:
    """What `write_all` did: writes that landed, targets refused, the error that stopped it,
    and every job's target as last known (job order), for statuses. `refused_at`: the earliest
    time a refusal was judged at: the statuses of a rejection are judged then, not later (a
    balance that refilled since would show no violation)."""

    written: list[Written]
    refused: list[Target]
    error: BaseException | None
    latest: list[Target]
    refused_at: int | None = None


class Waves:
    """Sends bucket writes for one namespace scope through a `BucketIO`, as one writer."""

    def __init__(
        self,
        bucket_io: BucketIO,
        images: ImageCache,
        clock: Callable[[], int],
        maker: planning.ItemMaker,
        shards: ShardChooser,
        *,
        on_written: Callable[[BucketImage], None],
        backoff: Backoff | None = None,
        load: Load | None = None,
    ) -> None:
        self.bucket_io = bucket_io
        self.images = images
        self.clock = clock
        self.maker = maker
        self.shards = shards
        self.on_written = on_written
        #: Told of a debit that landed for a caller that had left (Admission refunds it).
        self.on_orphan: Callable[[Written, int], None] | None = None
        regional = shards.regional
        self.lanes = lanes_.Lanes(
            self,
            clock,
            writer=None if regional is None else regional.writer(new_writer_id()),
            on_image=self._seen,
            rules_matter=lambda planned, current: planning.rules_matter(
                planned.stamp, current.stamp
            ),
            blank=self._blank_after,
            on_orphan=self._orphaned,
            backoff=backoff,
            recover=self._finish_split,
            load=load,
        )
        self.transfers = Transfers(bucket_io, shards, clock)
        self._settling: set[tuple[str, str, str, int]] = set()
        self._settle_tasks: set[asyncio.Future[None]] = set()

    @property
    def ns(self) -> str:
        return self.maker.ns

    async def write_all(
        self,
        jobs: list[tuple[Target, Planner]],
        *,
        settle: bool,
        revokes: list[int | None] | None = None,
        deadline: float | None = None,
        fold: bool = False,
    ) -> WaveResult:
        """Write every job through its item's lane until each lands or is refused.

        A planner maps (target with its latest image, now) to the limit writes and admissions
        delta, or None when a fresh image shows the request cannot be admitted. When several
        jobs are admitted together and one refuses on the images at hand, nothing is sent. With
        `settle` (exit writes and refunds, which never refuse), transient failures are retried
        longer. `revokes`: per job, the sequence of the debit a refund undoes (alerts drop what
        it crossed); `deadline` and `fold`: see `Lanes.write`.
        """
        written: list[Written] = []
        refused: list[Target] = []
        latest = [target for target, _ in jobs]
        error: BaseException | None = None
        if len(jobs) > 1 and not settle:
            judged_at = self.clock()
            jobs, refused = await self._refused_before_sending(jobs, latest, judged_at)
            if refused:
                return WaveResult(written, refused, error, latest, judged_at)
        refused_at: int | None = None
        rounds = SETTLE_ROUNDS if settle else MAX_ROUNDS
        if fold:
            lane_load.fold(self.lanes, [ImageCache.key_of(target.image) for target, _ in jobs])
        pending = list(enumerate(jobs))
        while pending:
            outcomes = await _settle_all(
                [
                    self.lanes.write(
                        target,
                        planner,
                        settle=settle,
                        rounds=rounds,
                        revokes=None if revokes is None else revokes[index],
                        deadline=deadline,
                        fold=fold,
                    )
                    for index, (target, planner) in pending
                ]
            )
            retry: list[tuple[int, tuple[Target, Planner]]] = []
            for (index, (_, planner)), outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    error = _reported(error, outcome)
                    continue
                target = outcome.target
                latest[index] = target
                if outcome.image is not None:
                    written.append(Written(target, outcome.image, outcome.writes, outcome.seq))
                elif outcome.refused:
                    if outcome.at is not None:
                        at = outcome.at
                        refused_at = at if refused_at is None else min(refused_at, at)
                    moved = self.shards.another(target, self.clock())
                    if moved is None:
                        moved = await self._survey(target)
                    if moved is None:
                        refused.append(replace(target, surveyed=True))
                    else:
                        latest[index] = moved
                        retry.append((index, (moved, planner)))
                else:
                    if isinstance(outcome.error, ShardGone):
                        self.images.forget(self.ns, target.entity_id, target.resource)
                    assert outcome.error is not None
                    error = _reported(error, outcome.error)
            pending = retry
        return WaveResult(written, refused, error, latest, refused_at)

    async def _refused_before_sending(
        self, jobs: list[tuple[Target, Planner]], latest: list[Target], now: int
    ) -> tuple[list[tuple[Target, Planner]], list[Target]]:
        """The jobs moved to shards that admit them on the images at hand (reading every shard of
        a sharded target once when what the process knows is not enough), and the targets that
        still refuse, judged at `now`."""
        refused = []
        moved_jobs = []
        for index, (target, planner) in enumerate(jobs):
            while planner(target, now) is None:
                moved = self.shards.another(target, now)
                if moved is None:
                    moved = await self._survey(target)
                if moved is None:
                    refused.append(replace(target, surveyed=True))
                    break
                target = moved
            latest[index] = target
            moved_jobs.append((target, planner))
        return moved_jobs, refused

    async def _survey(self, target: Target) -> Target | None:
        """Every shard tried refused a sharded target: read all of its shards at once and move it
        to one that admits it (once per call, and only then: what the process knew was not
        enough); on a multi-Region table, else to one of its Region's shards that capacity moved
        to from another Region's (`transfers`). None when it fits nowhere."""
        if target.stamp.shards <= 1 or target.surveyed:
            return None
        images = await self.bucket_io.read(
            [
                (self.ns, target.entity_id, target.resource, shard)
                for shard in range(target.stamp.shards)
            ]
        )
        now = self.clock()
        for image in images:
            self.images.put(image, now)
        fitting = self.shards.fitting(target, images, now)
        if fitting is None and self.shards.is_regional(target.stamp.shards):
            return await self.transfers.into(target, images)
        return fitting

    # --- a lane's sender (lanes.Sender) ---------------------------------------------------------

    async def send(
        self,
        image: BucketImage,
        exists: bool,
        writes: dict[str, LimitWrite],
        admissions: int,
        evidence: Evidence,
        now: int,
        revokes: tuple[int, ...] = (),
    ) -> BucketImage:
        """One bucket write: an update of `image`, or its creation when not `exists`;
        `revokes`: sequences of this writer's debits the write refunds (docs/alerts.md)."""
        states = dict(image.states)
        for name, write in writes.items():
            states[name] = write.result
        if exists:
            return await self.bucket_io.update(
                image,
                writes,
                now=now,
                ttl=self.maker.ttl(image.stamp, states, now),
                admissions=admissions,
                evidence=evidence,
                revokes=revokes,
            )
        new = self.maker.image_for(
            image,
            image.stamp,
            image.stamp_seq,
            states,
            now,
            admissions=max(0, admissions),
            evidence={evidence.writer: evidence.seq},
        )
        return await self.bucket_io.create(new, expired_before_s=now // 1000)

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        return await self.bucket_io.fence(image, evidence, blocked)

    async def read(self, image: BucketImage) -> BucketImage | None:
        found = await self.bucket_io.read([image.address])
        return found[0] if found else None

    def _orphaned(self, call: Call, outcome: Outcome) -> None:
        if call.settle or outcome.image is None:
            return  # an exit write or refund that landed did what it was for
        written = Written(outcome.target, outcome.image, outcome.writes, outcome.seq)
        if self.on_orphan is not None:
            self.on_orphan(written, call.admissions)
        else:
            log.error("a debit landed for a caller that had left on %s", outcome.target.resource)

    def _seen(self, image: BucketImage, landed: bool) -> None:
        now = self.clock()
        self.images.put(image, now)
        if landed:
            self.on_written(image)
        sibling = image.sibling
        if sibling is not None and now - sibling.written_at > SETTLE_AFTER_MS:
            self._settle_later(image)  # its splitter stopped half way: finish its split
        if image.outgoing and any(
            now - record.at > TRANSFER_SETTLE_AFTER_MS for record in image.outgoing.values()
        ):
            self._settle_later(image)  # a transfer its giver left untaken: take it

    def _settle_later(self, image: BucketImage) -> None:
        key = image.address
        if key in self._settling:
            return
        self._settling.add(key)

        async def settle() -> None:
            try:
                if image.sibling is not None:
                    await self.bucket_io.settle_sibling(image)
                await self.transfers.settle_stale(image)
            except (ItemChanged, Unavailable) as exc:
                log.warning("finishing a split of %s failed: %s", image.address, exc)
            finally:
                self._settling.discard(key)

        task = asyncio.ensure_future(settle())
        self._settle_tasks.add(task)
        task.add_done_callback(self._settle_tasks.discard)

    async def _finish_split(self, missing: BucketImage) -> BucketImage | None:
        """A shard found missing: the new half of a split its splitter did not finish? Then
        finish it (from the record on the shard it came from) and return it."""
        count = missing.stamp.shards
        parent = missing.shard - count // 2
        if count < 2 or parent < 0:
            return None
        found = await self.bucket_io.read([(self.ns, missing.entity_id, missing.resource, parent)])
        if not found or found[0].sibling is None or found[0].sibling.shard != missing.shard:
            return None
        try:
            return await self.bucket_io.settle_sibling(found[0])
        except ItemChanged:
            return None

    def _blank_after(self, image: BucketImage) -> BucketImage:
        """The stand-in for an item found deleted (expired): created by the next write."""
        return planning.blank_image(
            self.ns, image.entity_id, image.resource, image.stamp, image.stamp_seq + 1, image.shard
        )

    async def restamp(self, image: BucketImage, stamp: Stamp) -> BucketImage:
        """Rewrite an item under new rules, keeping balances (cut to lower ceilings)."""
        for _ in range(MAX_ROUNDS):
            now = self.clock()
            states = planning.restamped_states(image, stamp, now)
            restamped = self.maker.image_for(
                image,
                stamp,
                image.stamp_seq + 1,
                states,
                now,
                admissions=image.admissions,
                generation=image.generation,
                keeps=image,  # every writer's evidence survives a restamp
            )
            try:
                new = await self.bucket_io.replace(restamped, replaces=image)
            except ItemChanged as changed:
                if changed.current is None:
                    raise RulesChanged() from None
                image = changed.current
                if image.stamp.same_rules(stamp) and not planning.newer(stamp, image.stamp):
                    return image
                continue
            except AnswerLost:
                continue  # the snapshot guard makes a resend safe
            self.images.put(new, now)
            return new
        raise RulesChanged()

    async def create(self, target: Target) -> BucketImage:
        """Create the target's item (it must not exist), every limit full."""
        now = self.clock()
        evidence = Evidence(self.lanes.writer, self.lanes.next_seq(now))
        image = await self.send(target.image, False, {}, 0, evidence, now)
        self.images.put(image, self.clock())
        return image

    async def split(
        self, entity_id: str, resource: str, shards: int, extra: MoreOperations | None = None
    ) -> int:
        """Double a bucket's shards from `shards`, in one transaction (with `extra(doubled)`'s
        operations). Returns the new count."""
        addresses = [(self.ns, entity_id, resource, s) for s in range(shards)]
        for _ in range(MAX_ROUNDS):
            found = {image.shard: image for image in await self.bucket_io.read(addresses)}
            current = found.get(0)
            if current is None or current.stamp.shards != shards:
                return current.stamp.shards if current else shards
            if too_small_to_double(current.stamp.limits, shards) is not None:
                return shards  # a concurrency limit's share would fall below one unit
            # Split already (a split one item at a time that stopped half way): left out, its
            # new sibling created if it is not yet.
            done = {s: image for s, image in found.items() if image.stamp.shards != shards}
            for image in done.values():
                await self.bucket_io.settle_sibling(image)
            parts = split_parts(current, found, self.clock(), self.maker, done=set(done))
            more = await extra(shards * 2) if extra is not None else []
            try:
                await self.bucket_io.split(parts, token=new_op_id(), extra=more)
            except (ItemChanged, Unavailable):
                continue  # a concurrent write changed a shard's stamp: read again
            self.images.forget(self.ns, entity_id, resource)
            log.info("split %s/%s into %d shards", entity_id, resource, shards * 2)
            return shards * 2
        return shards


def _reported(error: BaseException | None, new: BaseException) -> BaseException:
    """The error a wave reports: the first, unless a later one says its write may have landed
    (an undecided write): the call must then never be told that nothing was debited."""
    if error is None or (_maybe_landed(new) and not _maybe_landed(error)):
        return new
    return error


def _maybe_landed(error: BaseException) -> bool:
    return isinstance(error, Unavailable) and error.maybe_landed


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
