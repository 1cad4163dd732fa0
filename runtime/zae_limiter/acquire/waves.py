"""Waves: the only code of the acquire path that sends bucket writes and reads their outcome.

A wave sends one conditional write per pending item, all at once. An outcome is one of:
the write landed (its new image); `ConditionFailed` with the current item (a newer stamp or a
concurrent writer's effect: plan again on it, unless the item shows our own operation id, which
means a lost response had landed); `ConditionFailed` with no item (it expired and was deleted:
create it); `UnknownOutcome` (resend, guarded so that it cannot apply twice); another
`DynamoError` (unavailable; retried a few times for writes that must settle).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from ..caches import ImageCache
from ..core.bucket import LimitWrite
from ..dynamo import bucket_items as items
from ..dynamo import keys, transport
from ..dynamo.bucket_items import BucketImage, Stamp
from ..dynamo.transport import ConditionFailed, DynamoError, UnknownOutcome
from . import planning
from .shards import ShardChooser, split_parts
from .store import BucketStore
from .values import Contended, Planner, RulesChanged, Target, Unavailable

log = logging.getLogger("zae_limiter")

MAX_ROUNDS = 5  # write attempts per item before a contended rejection
SETTLE_ROUNDS = 8  # attempts for exit writes and refunds


@dataclass(frozen=True)
class Written:
    """One job's write that landed: the target as written, the item after it, its changes."""

    target: Target
    image: BucketImage
    writes: dict[str, LimitWrite]


@dataclass(frozen=True)
class WaveResult:
    """What `write_all` did: writes that landed, targets refused, the error that stopped it,
    and every job's target as last known (job order), for statuses."""

    written: list[Written]
    refused: list[Target]
    error: BaseException | None
    latest: list[Target]


@dataclass(frozen=True)
class _Job:
    index: int
    target: Target
    planner: Planner
    op_id: str
    _: KW_ONLY
    guarded: bool  # refuse to apply if op_id already landed (a resend after a lost response)


@dataclass
class _Round:
    """Outcomes of one wave, gathered."""

    retry: list[_Job] = field(default_factory=list)
    error: BaseException | None = None
    unknown: UnknownOutcome | None = None


class Waves:
    """Sends bucket writes for one namespace scope through a `BucketStore`."""

    def __init__(
        self,
        store: BucketStore,
        images: ImageCache,
        clock: Callable[[], int],
        maker: planning.ItemMaker,
        shards: ShardChooser,
        *,
        on_written: Callable[[BucketImage], None],
    ) -> None:
        self.store = store
        self.images = images
        self.clock = clock
        self.maker = maker
        self.shards = shards
        self.on_written = on_written

    @property
    def ns(self) -> str:
        return self.maker.ns

    async def write_all(self, jobs: list[tuple[Target, Planner]], *, settle: bool) -> WaveResult:
        """Write every job in waves until each lands or is refused by its planner.

        A planner maps (target with its latest image, now) to the limit writes and admissions
        delta, or None when a fresh image shows the request cannot be admitted; then nothing more
        is sent. With `settle` (exit writes and refunds, which never refuse), transient failures
        are retried longer.
        """
        written: list[Written] = []
        latest = [target for target, _ in jobs]
        pending = [_Job(i, t, p, items.new_op_id(), guarded=False) for i, (t, p) in enumerate(jobs)]
        rounds = SETTLE_ROUNDS if settle else MAX_ROUNDS
        outcome = _Round()
        for attempt in range(rounds):
            if not pending or outcome.error is not None:
                break
            now = self.clock()
            planned, refused = self._plan(pending, now, latest)
            if refused:
                return WaveResult(written, refused, outcome.error, latest)
            retry_errors = settle and attempt + 1 < rounds
            outcome = await self._wave(
                planned, now, written, latest, attempt, retry_errors=retry_errors
            )
            pending = outcome.retry
            if pending and outcome.unknown is not None:
                await asyncio.sleep(0.02 * (attempt + 1) * transport.backoff_scale)
        error = outcome.error
        if pending and error is None:
            error = Unavailable(outcome.unknown) if outcome.unknown is not None else Contended()
        return WaveResult(written, [], error, latest)

    def _plan(
        self, pending: list[_Job], now: int, latest: list[Target]
    ) -> tuple[list[tuple[_Job, dict[str, LimitWrite], int]], list[Target]]:
        """Each job's writes on its latest image (moving a refused target to another shard)."""
        planned = []
        refused = []
        for job in pending:
            target = job.target
            result = job.planner(target, now)
            while result is None:
                moved = self.shards.another(target, now)
                if moved is None:
                    break
                target = moved
                result = job.planner(target, now)
            latest[job.index] = target
            if result is None:
                refused.append(target)
            else:
                planned.append(
                    (job if target is job.target else replace(job, target=target), *result)
                )
        return planned, refused

    async def _wave(
        self,
        planned: list[tuple[_Job, dict[str, LimitWrite], int]],
        now: int,
        written: list[Written],
        latest: list[Target],
        attempt: int,
        *,
        retry_errors: bool,
    ) -> _Round:
        """Send one wave and sort its outcomes."""
        results = await _settle_all(
            [
                self._send(job.target, writes, admissions, job.op_id, job.guarded, now)
                for job, writes, admissions in planned
            ]
        )
        round_ = _Round()
        for (job, writes, _), result in zip(planned, results, strict=True):
            if isinstance(result, BucketImage):
                self.images.put(result, self.clock())
                self.on_written(result)
                written.append(Written(job.target, result, writes))
            elif isinstance(result, ConditionFailed):
                retry = self._condition_failed(job, writes, result, written, round_)
                if retry is not None:
                    latest[job.index] = retry.target
                    round_.retry.append(retry)
            elif isinstance(result, UnknownOutcome):
                round_.unknown = result  # resend, guarded against a second application
                round_.retry.append(replace(job, guarded=True))
            elif isinstance(result, DynamoError):
                if retry_errors:
                    await asyncio.sleep(0.05 * (attempt + 1) * transport.backoff_scale)
                    round_.retry.append(job)
                else:
                    round_.error = round_.error or Unavailable(result)
            else:
                round_.error = round_.error or result
        return round_

    def _condition_failed(
        self,
        job: _Job,
        writes: dict[str, LimitWrite],
        failed: ConditionFailed,
        written: list[Written],
        round_: _Round,
    ) -> _Job | None:
        """The job to retry after a failed condition, or None (landed after all, or stopped)."""
        target = job.target
        if failed.item is None:  # expired and deleted: create it again
            blank = planning.blank_image(
                self.ns,
                target.entity_id,
                target.resource,
                target.stamp,
                target.image.stamp_seq + 1,
                target.image.shard,
            )
            return replace(job, target=replace(target, image=blank, exists=False))
        current = items.parse(failed.item)
        self.images.put(current, self.clock())
        if job.guarded and current.op_ids[items.op_slot(job.op_id)] == job.op_id:
            written.append(Written(target, current, writes))  # the lost response had landed
            return None
        if planning.rules_matter(target.stamp, current.stamp):
            round_.error = round_.error or RulesChanged()
            return None
        moved = replace(target, image=current, exists=True, read_now=True, seen_at=self.clock())
        return replace(job, target=moved)

    async def _send(
        self,
        target: Target,
        writes: dict[str, LimitWrite],
        admissions: int,
        op_id: str,
        guard_op: bool,
        now: int,
    ) -> BucketImage:
        image = target.image
        states = dict(image.states)
        for name, write in writes.items():
            states[name] = write.result
        if target.exists:
            return await self.store.update(
                image,
                writes,
                now=now,
                ttl=self.maker.ttl(image.stamp, states, now),
                admissions=admissions,
                op_id=op_id,
                guard_op=guard_op,
            )
        item = self.maker.item_for(
            image,
            image.stamp,
            image.stamp_seq,
            states,
            now,
            admissions=max(0, admissions),
            op_id=op_id,
        )
        return await self.store.create(item, expired_before_s=now // 1000)

    async def restamp(self, image: BucketImage, stamp: Stamp) -> BucketImage:
        """Rewrite an item under new rules, keeping balances (cut to lower ceilings)."""
        for _ in range(MAX_ROUNDS):
            now = self.clock()
            states = planning.restamped_states(image, stamp, now)
            op_id = items.new_op_id()
            item = self.maker.item_for(
                image,
                stamp,
                image.stamp_seq + 1,
                states,
                now,
                admissions=image.admissions,
                generation=image.generation,
                op_id=op_id,
            )
            for i, old_op in enumerate(image.op_ids):
                if old_op and f"q{i}" not in item:
                    item[f"q{i}"] = old_op
            try:
                new = await self.store.replace(item, replaces=image)
            except ConditionFailed as failed:
                if failed.item is None:
                    raise RulesChanged() from None
                image = items.parse(failed.item)
                if image.stamp.same_rules(stamp) and not planning.newer(stamp, image.stamp):
                    return image
                continue
            except UnknownOutcome:
                continue  # the snapshot guard makes a resend safe
            self.images.put(new, now)
            return new
        raise RulesChanged()

    async def split(self, entity_id: str, resource: str, shards: int) -> int:
        """Double a bucket's shards from `shards`, in one transaction. Returns the new count."""
        shard_keys = [keys.bucket(self.ns, entity_id, resource, s) for s in range(shards)]
        for _ in range(MAX_ROUNDS):
            found = {image.shard: image for image in await self.store.read(shard_keys)}
            current = found.get(0)
            if current is None or current.stamp.shards != shards:
                return current.stamp.shards if current else shards
            parts = split_parts(current, found, self.clock(), self.maker)
            try:
                await self.store.split(parts, token=items.new_op_id())
            except DynamoError:
                continue  # a concurrent write changed a shard's stamp: read again
            self.images.forget(self.ns, entity_id, resource)
            log.info("split %s/%s into %d shards", entity_id, resource, shards * 2)
            return shards * 2
        return shards


async def _settle_all(
    calls: list[Coroutine[Any, Any, BucketImage]],
) -> list[BucketImage | BaseException]:
    """Each call's result or exception, like gather(return_exceptions=True).

    A single call (the warm single-resource path) is awaited in place: no task, no extra loop turn.
    """
    if len(calls) == 1:
        try:
            return [await calls[0]]
        except Exception as exc:
            return [exc]
    return list(await asyncio.gather(*calls, return_exceptions=True))
