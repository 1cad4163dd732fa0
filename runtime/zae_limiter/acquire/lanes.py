"""Lanes: one writer's writes to one bucket item, one at a time, coalesced (docs/on-unavailable.md).

Every `Lanes` is one *writer* (an id no other writer shares). It keeps a lane per bucket item;
a lane has at most one write in flight. Writes that arrive while one is in flight queue up and go
out together as the next write: their limit writes are planned one after another on the item's
latest image and folded into one conditional UpdateItem (`core.compose`), so a hot item costs
one request per round trip per process, not one per call, and calls of one process never collide
with each other.

Each write carries the writer's next sequence number (`Evidence`) and applies only while the
item's entry for this writer is below it. Because a lane sends one write at a time, the entry
tells exactly whether a write whose answer was lost landed: it holds that write's sequence, or
an older one. A write found not landed after a lost answer is *fenced* (its sequence is made
unusable with one small write) before its calls are planned again, so a late copy of it can
never apply. Other writers' traffic cannot erase the evidence.
Sends take request slots of the writer's `load.Load`; see also `lane_load` (overload).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from ..core.bucket import LimitWrite
from ..core.compose import then_all
from ..core.evolve import evolve
from ..core.images import BucketImage, Evidence, new_writer_id
from . import holds_seen
from .deadlines import Backoff
from .lane_calls import UNKNOWN_RESENDS as UNKNOWN_RESENDS
from .lane_calls import Batch, Call, Outcome, Sender, Undecided
from .load import Load
from .skew import SkewWatch
from .values import (
    AnswerLost,
    Contended,
    ItemChanged,
    Planner,
    RulesChanged,
    ShardGone,
    Target,
    Unavailable,
)

log = logging.getLogger("zae_limiter")

#: Calls folded into one write at most.
MAX_BATCH = 64
#: Another writer's entry older than this (by this writer's clock) is removed by the next write.
#: It must exceed the longest time a copy of a write can still land (`deadlines.RESEND_BOUND_MS`
#: plus one request's timeouts, which `open()` caps) plus the clock skew between processes
#: (docs/on-unavailable.md; checked in tests/unit/test_acquire_deadlines.py).
PRUNE_AGE_MS = 5 * 60_000
#: Entries removed per write at most (keeps the request small).
PRUNE_PER_WRITE = 2


class Lanes:
    """One writer's lanes (see the module docstring)."""

    def __init__(
        self,
        sender: Sender,
        clock: Callable[[], int],
        *,
        on_image: Callable[[BucketImage, bool], None],
        rules_matter: Callable[[BucketImage, BucketImage], bool],
        blank: Callable[[BucketImage], BucketImage],
        writer: str | None = None,
        on_orphan: Callable[[Call, Outcome], None] | None = None,
        backoff: Backoff | None = None,
        load: Load | None = None,
    ) -> None:
        self.sender = sender
        self.load = load if load is not None else Load()
        self.backoff = backoff if backoff is not None else Backoff()
        self.on_orphan = on_orphan
        self.on_leave: Callable[[asyncio.Future[None]], None] | None = None
        self.clock = clock
        self.on_image = on_image
        self.rules_matter = rules_matter
        self.blank = blank
        self.writer = writer or new_writer_id()
        self.undecided = 0  # writes given up on with their outcome unknown (a metric)
        self.skew = SkewWatch(self.writer)
        self.ledger = holds_seen.ledger_for(self.writer)  # its concurrency holds
        self._seq = 0
        #: the lanes of items with calls, by item (acquire/lane_load.py reads them)
        self.by_item: dict[tuple[str, str, str, int], _Lane] = {}

    @property
    def skewed(self) -> int:
        """Writes planned on items stamped too far ahead of this writer's clock (a metric)."""
        return self.skew.sightings

    def next_seq(self, now: int) -> int:
        """Strictly increasing, and about the writer's clock (so entries show their age)."""
        self._seq = max(self._seq + 1, now)
        return self._seq

    async def write(
        self,
        target: Target,
        planner: Planner,
        *,
        settle: bool,
        rounds: int,
        deadline: float | None = None,
        fold: bool = False,
    ) -> Outcome:
        image = target.image
        key = (image.ns, image.entity_id, image.resource, image.shard)
        lane = self.by_item.get(key)
        if lane is None:
            lane = self.by_item[key] = _Lane(self, key)
        call = Call(target, planner, settle, rounds, asyncio.get_running_loop().create_future())
        call.deadline = deadline  # Load ms: a throttled debit is tried again only before it
        lane.queue.append(call)
        try:
            if not lane.busy and not fold:  # a folded call waits (lane_load.fold)
                lane.busy = True
                try:
                    await lane.drain(until=call)
                finally:
                    lane.release()
            return await call.future
        except asyncio.CancelledError:
            self._left(call, lane)
            raise

    def _left(self, call: Call, lane: _Lane) -> None:
        """Its caller was cancelled: what lands for the call from now on goes to `on_orphan`
        (an outcome it was already told goes there now), and the write in flight on its lane,
        which decides the call, is handed to `on_leave` (resolved off the caller's path, counted
        once per caller, drained at close)."""
        future = call.future
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            call.resolve(future.result(), self.on_orphan)  # told, but never heard: to `on_orphan`
        if lane.inflight is not None and self.on_leave is not None:
            self.on_leave(asyncio.shield(lane.inflight))  # one per caller that left

    def retire(self, key: tuple[str, str, str, int]) -> None:
        """Forget an item's lane once it is free (the next call opens a new one)."""
        self.by_item.pop(key, None)


class _Lane:
    """One item's queue of calls and its latest image."""

    def __init__(self, lanes: Lanes, key: tuple[str, str, str, int]) -> None:
        self.lanes = lanes
        self.key = key
        self.queue: deque[Call] = deque()
        self.busy = False
        self.image: BucketImage | None = None
        self.exists = True
        self._task: asyncio.Future[None] | None = None  # a drain after its caller's call ended
        self.inflight: asyncio.Future[None] | None = None  # a batch sent as a task
        self.flying: list[Call] = []  # the calls of the batch formed last (lane_load.py)
        self.sent_at: float | None = None  # when the request in flight was sent; its smoothed
        self.rtt_ms = 0.0  # round trip

    def release(self) -> None:
        """Hand the lane to a background drain if calls are still queued or a batch is still
        in flight (its caller was cancelled), else free it."""
        if self.queue or self.inflight is not None:
            self._task = asyncio.ensure_future(self._drain_rest())
        else:
            self.busy = False
            self.lanes.retire(self.key)

    async def _drain_rest(self) -> None:
        try:
            while self.inflight is not None:  # never a second write while one is in flight
                await asyncio.shield(self.inflight)
            await self.drain(until=None)
        finally:
            self.busy = False
            if self.queue:  # arrived as the drain ended
                self.busy = True
                self._task = asyncio.ensure_future(self._drain_rest())
            else:
                self.lanes.retire(self.key)

    async def drain(self, *, until: Call | None) -> None:
        """Write batches until `until` is decided (or, with None, until the queue is empty).

        A batch carrying only `until` is sent in place (the warm path: no task); one carrying
        other calls runs as a task, so that cancelling this caller cannot strand theirs, and
        nothing else is sent on the lane until it ends.
        """
        while self.queue and (until is None or not until.future.done()):
            if self.inflight is not None:
                await asyncio.shield(self.inflight)
                continue
            batch = self._form()
            if batch is None:
                continue
            self.flying = batch.calls
            if batch.calls == [until]:
                await self._in_place(batch)
                continue
            await asyncio.shield(self._go_on(self._run(batch)))

    def _go_on(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run `work` as the lane's write in flight: no caller's cancellation can cut it."""
        task = self.inflight = asyncio.ensure_future(work)
        task.add_done_callback(self._sent)
        return task

    def _sent(self, _: asyncio.Future[None]) -> None:
        self.inflight = None

    async def _in_place(self, batch: Batch) -> None:
        """Send a batch of the caller's own call in the caller's task (the warm path: no task).

        Cancelled while the send is out, its outcome is unknown: a task sends it again as after
        a lost answer (its evidence lets it land once) and `Lanes.write` hands what lands to
        `on_orphan`. After any other failure the rest (re-sends, fences) runs as a task.
        """
        try:
            image = await self._send(batch)
        except asyncio.CancelledError:
            if batch.first_sent is None:
                raise  # cancelled while waiting for a request slot: nothing was sent
            batch.lost += 1
            self._go_on(self._run(batch))
            raise
        except Exception as exc:
            await asyncio.shield(self._go_on(self._run(batch, exc)))
            return
        self._landed(batch, image)

    # --- forming a batch ---------------------------------------------------------------------

    def _adopt(self, target: Target) -> None:
        """Take a call's image if it is newer than the lane's."""
        image = self.image
        mine = target.image
        if image is None or (mine.stamp_seq, mine.writes) > (image.stamp_seq, image.writes):
            self.image, self.exists = mine, target.exists

    def _form(self) -> Batch | None:
        """Plan queued calls one after another on the latest image; None if the first refused."""
        first = self.queue[0]
        self._adopt(first.target)
        assert self.image is not None
        now = first.now if first.now is not None else self.lanes.clock()
        base, exists = self.image, self.exists
        projected = base
        calls: list[Call] = []
        plans: list[dict[str, LimitWrite]] = []
        combined: dict[str, LimitWrite] = {}
        admissions = 0
        while self.queue and len(calls) < MAX_BATCH:
            call = self.queue[0]
            if call.future.done():  # its caller left before it was sent: nothing to write
                self.queue.popleft()
                continue
            if call.now != first.now:
                break  # a retry plans at its first time, a new call at the clock: never older
            if calls and (call.target.image.stamp_seq, call.target.image.writes) > (
                base.stamp_seq,
                base.writes,
            ):
                break  # it knows a newer image: plan it in the next batch on that
            target = call.target
            if target.image is not projected or target.exists is not exists:
                target = evolve(target, image=projected, exists=exists)
            result = call.planner(target, now)
            if result is None:
                if calls:
                    break  # may fit alone, on the image the batch returns
                self.queue.popleft()
                call.resolve(Outcome(target, refused=True, at=now), self.lanes.on_orphan)
                return None
            writes, delta = result
            call.admissions = delta
            joined = then_all(combined, writes) if calls else dict(writes)
            if joined is None:
                break
            self.queue.popleft()
            calls.append(call)
            plans.append(writes)
            combined = joined
            admissions += delta
            states = dict(projected.states)
            for name, write in writes.items():
                states[name] = write.result
            projected = evolve(projected, states=states)
        if not calls:
            return None  # every queued call's caller had left
        skewed = self.lanes.skew.stamped_ahead(base, now)
        prune = () if skewed else self._prunable(base, now)
        evidence = Evidence(self.lanes.writer, self.lanes.next_seq(now), prune)
        return Batch(calls, plans, base, exists, combined, admissions, evidence, now, 0, skewed)

    def _prunable(self, image: BucketImage, now: int) -> tuple[tuple[str, int], ...]:
        old = [
            (writer, seq)
            for writer, seq in image.evidence.items()
            if writer != self.lanes.writer and seq < now - PRUNE_AGE_MS
        ]
        return tuple(sorted(old, key=lambda entry: entry[1])[:PRUNE_PER_WRITE])

    # --- sending and reading the outcome -----------------------------------------------------

    async def _run(self, batch: Batch, failure: Exception | None = None) -> None:
        """Send the batch (after `failure`, the answer to its last send) until it is decided."""
        while True:
            if failure is None:
                try:
                    image = await self._send(batch)
                except Exception as exc:
                    failure = exc
                else:
                    self._landed(batch, image)
                    return
            if not await self._failed(batch, failure):
                return
            failure = None

    async def _send(self, batch: Batch) -> BucketImage:
        lanes = self.lanes
        if lanes.load.rate is not None and len(batch.calls) > 1:  # a hot item's batch: paced
            await lanes.load.paced(lanes.backoff.pause)
        if not lanes.load.take():
            await lanes.load.wait()
        if batch.first_sent is None:
            batch.first_sent = lanes.clock()
        self.sent_at = lanes.load.clock()
        try:
            image = await lanes.sender.send(
                batch.image, batch.exists, batch.writes, batch.admissions, batch.evidence, batch.now
            )
        except BaseException as exc:
            lanes.load.ended(self, lanes.load.clock(), exc)
            raise
        lanes.load.ended(self, lanes.load.clock(), None)
        return image

    async def _failed(self, batch: Batch, failure: Exception) -> bool:
        """Act on a send's failure; True when the same write is to be sent again."""
        lanes = self.lanes
        if isinstance(failure, ItemChanged):
            await self._condition_failed(batch, failure.current)
        elif isinstance(failure, AnswerLost):
            batch.lost += 1
            if not batch.skewed and batch.resend_allowed(lanes.clock()):
                await lanes.backoff.pause(0.02 * batch.lost)
                return True  # the same write again: its evidence lets it land only once
            self._give_up(batch, failure)
        elif isinstance(failure, Unavailable) and batch.lost:
            batch.lost += 1  # still unknown whether an earlier send landed
            if batch.resend_allowed(lanes.clock()):
                await lanes.backoff.pause(0.05 * batch.lost)
                return True
            self._give_up(batch, failure)
        elif isinstance(failure, Unavailable):
            await self._unavailable(batch, failure)
        else:  # not a DynamoDB answer: nothing more to learn here
            self._fail(batch.calls, failure)
        return False

    def _landed(self, batch: Batch, image: BucketImage) -> None:
        self.image, self.exists = image, True
        holds_seen.landed(self.lanes, self.key, batch.writes, image, batch.now)
        self.lanes.on_image(image, True)
        for call, writes in zip(batch.calls, batch.plans, strict=True):
            target = evolve(call.target, image=image, exists=True)
            call.resolve(Outcome(target, image=image, writes=writes), self.lanes.on_orphan)

    async def _condition_failed(self, batch: Batch, current: BucketImage | None) -> None:
        lanes = self.lanes
        holds_seen.refused(lanes, self.key, batch.writes, current)
        if current is not None:
            lanes.on_image(current, False)
            if batch.lost and current.evidence.get(lanes.writer, -1) >= batch.evidence.seq:
                self._landed(batch, current)  # the lost answer's write had landed
                return
        if batch.lost and current is not None:
            decided, current = await self._fence(batch, current)
            if not decided:
                return  # undecided: its calls were told
            if current is not None and current.evidence.get(lanes.writer) == batch.evidence.seq:
                self._landed(batch, current)  # it landed just before the fence
                return
        if current is None and batch.image.shard != 0 and not any(c.settle for c in batch.calls):
            # A split bucket's shard is gone (its entity was deleted): only the slow path, from
            # shard 0, creates a bucket, never on a layout this process remembers.
            self._fail(batch.calls, ShardGone())
            return
        if current is None:  # expired and deleted: create it again
            self.image, self.exists = lanes.blank(batch.image), False
        else:
            if lanes.rules_matter(batch.image, current):
                self._fail(batch.calls, RulesChanged())
                return
            self.image, self.exists = current, True
        self._retry(batch, self.image)

    async def _fence(self, batch: Batch, current: BucketImage) -> tuple[bool, BucketImage | None]:
        """After a lost answer and a failed re-send: make the write's sequence unusable, so no
        late copy of it can land once its calls are planned again. Returns (decided, the item
        after the fence or as found; None if it is gone)."""
        lanes = self.lanes
        fence = Evidence(lanes.writer, lanes.next_seq(lanes.clock()))
        cause: BaseException = Undecided("the fence after a lost answer could not land")
        for attempt in range(UNKNOWN_RESENDS + 1):
            lanes.load.writes += 1
            try:
                image = await lanes.sender.fence(current, fence, batch.evidence.seq)
            except ItemChanged as changed:
                seen = changed.current
                if seen is None:
                    return True, None  # gone: an update cannot land on no item
                lanes.on_image(seen, False)
                return True, seen  # holds the write's sequence (landed), our fence, or later
            except Unavailable as exc:  # a lost answer too
                cause = exc
                await lanes.backoff.pause(0.02 * (attempt + 1))
                continue
            lanes.on_image(image, False)
            return True, image
        self._give_up(batch, cause)
        return False, None

    def _retry(self, batch: Batch, image: BucketImage) -> None:
        """Put the batch's calls back at the front, to plan again on `image` at the same time."""
        retry: list[Call] = []
        for call in batch.calls:
            if call.future.done():
                continue  # its caller left and nothing of it landed: drop it
            call.tries += 1
            if call.tries >= call.rounds:  # on the item as found: the refusal judges it there
                found = evolve(call.target, image=image, exists=self.exists)
                call.future.set_result(Outcome(found, error=Contended()))
                continue
            call.now = batch.now
            call.target = evolve(
                call.target,
                image=image,
                exists=self.exists,
                read_now=True,
                seen_at=self.lanes.clock(),
            )
            retry.append(call)
        self.queue.extendleft(reversed(retry))

    async def _unavailable(self, batch: Batch, exc: Unavailable) -> None:
        """Certainly not applied: settle calls wait and retry, and so does a debit throttled
        while it can still be decided before its deadline; the others give up."""
        waiting = False
        retry = []
        load = self.lanes.load
        soon = load.now_ms() + load.slow_rtt_ms(self.rtt_ms or load.rtt_ms)
        for call in batch.calls:
            call.tries += 1
            again = call.settle or (exc.throttled and call.in_time(soon + 50 * call.tries))
            if again and call.tries < call.rounds and not call.future.done():
                retry.append(call)
                waiting = True
            else:
                call.resolve(Outcome(call.target, error=exc), self.lanes.on_orphan)
        if waiting:
            await self.lanes.backoff.pause(0.05 * max(c.tries for c in retry))
            self.queue.extendleft(reversed(retry))

    def _give_up(self, batch: Batch, cause: BaseException) -> None:
        self.lanes.undecided += 1
        image = batch.image
        log.warning(
            "write outcome undecided after %d lost answers on item %s/%s/%s shard %d "
            "(writer %s, sequence %d): %s",
            batch.lost,
            image.ns,
            image.entity_id,
            image.resource,
            image.shard,
            self.lanes.writer,
            batch.evidence.seq,
            cause,
        )
        holds_seen.undecided(self.lanes, self.key, batch.writes)
        # Whatever the last answer said, an earlier send may have landed.
        error = cause if isinstance(cause, AnswerLost) else AnswerLost(cause)
        self._fail(batch.calls, error)

    def _fail(self, calls: list[Call], error: BaseException) -> None:
        for call in calls:
            if not call.future.done():
                call.future.set_result(Outcome(call.target, error=error))
