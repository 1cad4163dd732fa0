"""Lanes: one writer's writes to one bucket item, one at a time, coalesced (docs/on-unavailable.md).

Every `Lanes` is one *writer* (an id no other writer shares). It keeps a lane per bucket item;
a lane has at most one write in flight. Writes that arrive while one is in flight queue up and go
out together as the next write: their limit writes are planned one after another on the item's
latest image and folded into one conditional UpdateItem (`core.compose`), so a hot item costs
one request per round trip per process, not one per call, and calls of one process never collide
with each other.

Each write carries the writer's next sequence number (`Evidence`, core/evidence.py) and applies
only while the item's entry for this writer is below it (or absent under the item's floor).
Because a lane sends one write at a time, the entry tells exactly whether a write whose answer
was lost landed: it holds that write's sequence, or an older one. A write found not landed
after a lost answer is *fenced* (its sequence is made unusable with one small write) before its
calls are planned again, so a late copy of it can never apply. Other writers' traffic cannot
erase the evidence; an entry they removed (old, or to make room on an item with many writers)
raised the floor, so the write can never land again, and its outcome is undecided.

Nothing is given up while the process lives: when re-sending keeps losing its answer, the lane
decides by a strongly consistent read of its entry on the item (then fences), pausing with
backoff through an outage of any length; exit writes and refunds that certainly did not apply
are sent again the same way. Only `close()` ends it (`Lanes.close`: what is left is logged,
one line per item, by `leftovers`). Sends take request slots of the writer's `load.Load`; see
also `lane_load` (overload).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..core import evidence as writer_evidence
from ..core.bucket import LimitWrite
from ..core.compose import then_all
from ..core.evidence import PRUNE_AGE_MS as PRUNE_AGE_MS
from ..core.evolve import evolve
from ..core.images import BucketImage, Evidence, new_writer_id
from . import holds_seen, lane_turns
from .deadlines import Backoff
from .lane_calls import MAX_BATCH as MAX_BATCH
from .lane_calls import UNKNOWN_RESENDS as UNKNOWN_RESENDS
from .lane_calls import Batch, Call, Closed, Outcome, Sender
from .lane_failures import Failures
from .leftovers import Leftovers
from .load import Load
from .skew import SkewWatch
from .values import AnswerLost, Planner, RulesChanged, Target, Unavailable

log = logging.getLogger("zae_limiter")


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
        recover: Callable[[BucketImage], Awaitable[BucketImage | None]] | None = None,
        load: Load | None = None,
    ) -> None:
        self.sender = sender
        self.load = load if load is not None else Load()
        #: Finds a shard that is missing because its split was not finished (docs/multi-region.md)
        self.recover = recover
        self.backoff = backoff if backoff is not None else Backoff()
        self.on_orphan = on_orphan
        self.on_leave: Callable[[asyncio.Future[None]], None] | None = None
        self.clock = clock
        self.on_image = on_image
        self.rules_matter = rules_matter
        self.blank = blank
        self.writer = writer or new_writer_id()
        self.undecided = 0  # writes given up on with their outcome unknown (a metric)
        self.resolved_by_resend = 0  # lost answers decided by sending the same write again
        self.resolved_by_read = 0  # lost answers decided by reading the writer's entry
        # what close() left, one line per item
        self.leftovers = Leftovers(self.writer, lambda: self.next_seq(self.clock()))
        self.closed = False
        self.unkept = 0  # writes sent without evidence: their item was full of young entries
        self.skew = SkewWatch(self.writer)
        self.ledger = holds_seen.ledger_for(self.writer)  # its concurrency holds
        self._seq = 0
        #: the lanes of items with calls, by item (acquire/lane_load.py reads them)
        self.by_item: dict[tuple[str, str, str, int], _Lane] = {}
        #: targets of debits on their way to their lanes (acquire/lane_load.py `sending`)
        self.sending: dict[tuple[str, str, str, int], list[Target]] = {}

    @property
    def skewed(self) -> int:
        """Writes planned on items stamped too far ahead of this writer's clock (a metric)."""
        return self.skew.sightings

    def next_seq(self, now: int, image: BucketImage | None = None) -> int:
        """Strictly increasing, about the writer's clock (so entries show their age), and above
        `image`'s floor."""
        self._seq = (
            max(self._seq + 1, now)
            if image is None
            else writer_evidence.next_seq(self._seq, now, image)
        )
        return self._seq

    def evidence(self, image: BucketImage, now: int, skewed: bool) -> Evidence:
        """The evidence of this writer's next write to `image`, planned at `now`."""
        seq = self.next_seq(now, image)
        evidence = writer_evidence.plan(image, self.writer, seq, now, skewed=skewed)
        if not evidence.kept:
            self.unkept += 1
        return evidence

    async def write(
        self,
        target: Target,
        planner: Planner,
        *,
        settle: bool,
        rounds: int,
        revokes: int | None = None,
        deadline: float | None = None,
        fold: bool = False,
    ) -> Outcome:
        image = target.image
        key = (image.ns, image.entity_id, image.resource, image.shard)
        if self.closed:
            if settle:  # an exit write or refund that can no longer be sent: logged
                self.leftovers.unsent(key, target, planner, self.clock())
            return Outcome(target, error=Unavailable(Closed()))
        lane = self.by_item.get(key)
        if lane is None:
            lane = self.by_item[key] = _Lane(self, key)
        call = Call(
            target, planner, settle, rounds, asyncio.get_running_loop().create_future(), revokes
        )
        call.deadline = deadline  # Load ms: a throttled debit is tried again only before it
        if self.sending:
            call.turned = self.arrived(key, target) and self.load.rate is not None
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

    def arrived(self, key: tuple[str, str, str, int], target: Target) -> bool:
        """Drop `target` from `sending`; whether it was there."""
        coming = self.sending.get(key)
        if coming is None or not any(t is target for t in coming):
            return False
        coming[:] = [t for t in coming if t is not target]
        if not coming:
            del self.sending[key]
        return True

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

    def close(self) -> list[asyncio.Future[None]]:
        """Stop: log what every lane still has in flight or queued (one line per item, counted
        in `leftovers`), and return the lanes' tasks for the caller to cancel. From now on
        nothing is sent, and a write that ends is logged instead of followed up."""
        self.closed = True
        tasks: list[asyncio.Future[None]] = []
        for lane in list(self.by_item.values()):
            lane.leave_behind()
            tasks += [t for t in (lane.inflight, lane.drainer) if t is not None and not t.done()]
        return tasks


class _Lane(Failures):
    """One item's queue of calls and its latest image (what a failed send means: `Failures`)."""

    lanes: Lanes

    def __init__(self, lanes: Lanes, key: tuple[str, str, str, int]) -> None:
        self.lanes = lanes
        self.key = key
        self.queue: deque[Call] = deque()
        self.busy = False
        self.image: BucketImage | None = None
        self.exists = True
        self.drainer: asyncio.Future[None] | None = None  # a drain after its caller's call ended
        self.inflight: asyncio.Future[None] | None = None  # a batch sent as a task
        self.sending: Batch | None = None  # the batch being sent or decided (close() logs it)
        self.flying: list[Call] = []  # the calls of the batch formed last (lane_load.py)
        self.sent_at: float | None = None  # when the request in flight was sent; its smoothed
        self.rtt_ms = 0.0  # round trip

    def release(self) -> None:
        """Hand the lane to a background drain if calls are still queued or a batch is still
        in flight (its caller was cancelled), else free it."""
        if self.queue or (self.inflight is not None and self.in_flight()):  # warm: no call
            self.drainer = asyncio.ensure_future(self._drain_rest())
        else:
            self.busy = False
            self.lanes.retire(self.key)

    async def _drain_rest(self) -> None:
        closed = False
        try:
            while self.in_flight():  # never a second write while one is in flight
                assert self.inflight is not None
                await asyncio.shield(self.inflight)
            await self.drain(until=None)
        except GeneratorExit:  # the coroutine is closed (its loop is gone): start nothing
            closed = True
            raise
        finally:
            self.busy = False
            if self.queue and not closed:  # arrived as the drain ended
                self.busy = True
                self.drainer = asyncio.ensure_future(self._drain_rest())
            else:
                self.lanes.retire(self.key)

    async def drain(self, *, until: Call | None) -> None:
        """Write batches until `until` is decided (or, with None, until the queue is empty).

        A batch carrying only `until` is sent in place (the warm path: no task); one carrying
        other calls runs as a task, so that cancelling this caller cannot strand theirs, and
        nothing else is sent on the lane until it ends.
        """
        waited = until is None  # a background drain: its calls' callers may have left
        while self.queue and (until is None or not until.future.done()):
            if self.inflight is not None and self.in_flight():  # warm: no call
                await asyncio.shield(self.inflight)
                waited = True
                continue
            if (waited or len(self.queue) > 1) and not await lane_turns.ready(self):
                continue  # (the warm path, one call that waited for nothing, skips this)
            batch = self._form()
            if batch is None:
                continue
            self.flying = batch.calls
            if batch.calls == [until] and batch.evidence.kept:
                await self._in_place(batch)
                continue
            await self._until(self._go_on(self._run(batch)), until)

    def _go_on(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run `work` as the lane's write in flight: no caller's cancellation can cut it."""
        task = self.inflight = asyncio.ensure_future(work)
        task.add_done_callback(self._sent)
        return task

    def _sent(self, sent: asyncio.Future[None]) -> None:
        if self.inflight is sent:
            self.inflight = None

    def in_flight(self) -> bool:
        """A batch sent as a task has not ended. (Ended, it may still be `inflight` until its
        done callback runs: awaiting it then would not yield, and a loop on it would spin.)"""
        return self.inflight is not None and not self.inflight.done()

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
            if self.lanes.closed:  # cut by close(): nothing follows it up any more
                self.lanes.leftovers.lane(self.key, batch, [], self.image)
            else:
                self._go_on(self._run(batch))
            raise
        except Exception as exc:
            await self._until(self._go_on(self._run(batch, exc)), batch.calls[0])
            return
        self.landed(batch, image)

    async def _until(self, task: asyncio.Future[None], call: Call | None) -> None:
        """Wait for the batch in flight, or only until `call` is told (an admission whose write
        is decided off its caller's path, through an outage): the rest is adopted as pending."""
        if call is None:
            await asyncio.shield(task)
            return
        told: asyncio.Future[Any] = call.future
        await asyncio.wait({task, told}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and self.lanes.on_leave is not None:
            self.lanes.on_leave(asyncio.shield(task))

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
        revokes: tuple[int, ...] = ()
        while self.queue and len(calls) < MAX_BATCH:
            call = self.queue[0]
            if call.future.done():  # its caller left before it was sent: nothing to write
                self.queue.popleft()
                continue
            if not call.settle and self.lanes.rules_matter(call.target.image, base):
                # It chose its items (a cascade parent or none) under other rules than the
                # item's now (a write before it met a restamp): it resolves again, as that
                # write's calls do (`_not_landed`). Exit writes and refunds go on the new rules.
                self.queue.popleft()
                call.resolve(Outcome(call.target, error=RulesChanged()), self.lanes.on_orphan)
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
            if call.revokes is not None:
                revokes += (call.revokes,)
            combined = joined
            admissions += delta
            states = dict(projected.states)
            for name, write in writes.items():
                states[name] = write.result
            projected = evolve(projected, states=states)
        if not calls:
            return None  # every queued call's caller had left
        skewed = self.lanes.skew.stamped_ahead(base, now)
        evidence = self.lanes.evidence(base, now, skewed)
        return Batch(
            calls, plans, base, exists, combined, admissions, evidence, now, 0, skewed, revokes
        )

    # --- sending and reading the outcome -----------------------------------------------------

    async def _run(self, batch: Batch, failure: Exception | None = None) -> None:
        """Send the batch (after `failure`, the answer to its last send) until it is decided."""
        self.sending = batch
        try:
            while True:
                if failure is None:
                    try:
                        image = await self._send(batch)
                    except Exception as exc:
                        failure = exc
                    else:
                        if batch.lost:
                            self.lanes.resolved_by_resend += 1
                        self.landed(batch, image)
                        return
                if not await self.after_failure(batch, failure):
                    return
                failure = None
        except asyncio.CancelledError:
            if self.lanes.closed:  # close() logged it: tell its calls, then stop
                # once sent, it may have applied (its answer is what close() cut)
                sent = batch.lost or batch.first_sent is not None
                cut = AnswerLost(Closed()) if sent else Unavailable(Closed())
                self.fail(batch.calls, cut)
            raise
        finally:
            self.sending = None

    async def _send(self, batch: Batch) -> BucketImage:
        lanes = self.lanes
        if lanes.closed:
            raise Closed()
        if not lanes.load.take():
            await lanes.load.wait()
        if batch.first_sent is None:
            batch.first_sent = lanes.clock()
        self.sent_at = lanes.load.clock()
        try:
            image = await lanes.sender.send(
                batch.image,
                batch.exists,
                batch.writes,
                batch.admissions,
                batch.evidence,
                batch.now,
                batch.revokes,
            )
        except BaseException as exc:
            lanes.load.ended(self, lanes.load.clock(), exc)
            raise
        lanes.load.ended(self, lanes.load.clock(), None)
        return image

    def leave_behind(self) -> None:
        """`close()` gave up on this lane: log its batch in flight and its queued exit writes
        and refunds (one line for the item), then fail its calls."""
        calls = [c for c in self.queue if c.settle and not c.future.done()]
        self.lanes.leftovers.lane(self.key, self.sending, calls, self.image)
        self.queue.clear()
        for call in calls:
            call.future.cancel()
