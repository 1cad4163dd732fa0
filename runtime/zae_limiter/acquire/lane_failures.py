"""What a lane does when a send fails: a condition failed, an answer was lost, the table is out.

`Failures` is the part of a lane (`lanes._Lane`) that reads a failed send (docs/on-unavailable.md):

- a failed condition returns the item: a write whose answer was lost before is decided by this
  writer's entry on it (or *fenced*, so that no late copy of it lands), then its calls are
  planned again on the item as found;
- a lost answer is re-sent (the same write: its evidence lets it land once) within the re-send
  bounds; past them the lane *decides* by a strongly consistent read of its entry, then a fence,
  trying again with backoff while the table does not answer;
- a failure that certainly did not apply fails admissions (their callers apply
  `on_unavailable`), unless throttled with time left to be decided before their deadline
  (docs/on-unavailable.md "Overload"), and sends exit writes and refunds again after a pause.

Nothing here is given up while the process lives; a write stays undecided only when its item
shows a writer too far ahead (`skew`), when it was sent without evidence (its item full of young
entries, `core.evidence`), when another writer removed its entry (the item's floor then blocks
any copy of it), or when `close()` stops the lanes.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from .. import namespace_labels
from ..core.evidence import Decided, decide
from ..core.evolve import evolve
from ..core.hold_ledger import Ledger
from ..core.images import BucketImage, Evidence
from . import holds_seen
from .deadlines import Backoff, outage_pause
from .lane_calls import (
    ENTRY_REMOVED,
    UNKNOWN_RESENDS,
    Batch,
    Call,
    Closed,
    Outcome,
    Sender,
    Undecided,
)
from .load import Load
from .values import (
    AnswerLost,
    Contended,
    ItemChanged,
    RulesChanged,
    ShardGone,
    Unavailable,
)

log = logging.getLogger("zae_limiter")


class Writer(Protocol):
    """What a lane's failures need of its writer (`lanes.Lanes`)."""

    sender: Sender
    backoff: Backoff
    load: Load
    writer: str
    ledger: Ledger
    closed: bool
    undecided: int
    resolved_by_resend: int
    resolved_by_read: int
    clock: Callable[[], int]
    on_image: Callable[[BucketImage, bool], None]
    on_orphan: Callable[[Call, Outcome], None] | None
    rules_matter: Callable[[BucketImage, BucketImage], bool]
    blank: Callable[[BucketImage], BucketImage]
    recover: Callable[[BucketImage], Awaitable[BucketImage | None]] | None

    def next_seq(self, now: int, image: BucketImage | None = None) -> int: ...


class Failures:
    """A lane's handling of failed sends (see the module docstring)."""

    lanes: Writer
    key: tuple[str, str, str, int]
    queue: deque[Call]
    image: BucketImage | None
    exists: bool
    rtt_ms: float

    async def after_failure(self, batch: Batch, failure: Exception) -> bool:
        """Act on a send's failure; True when the same write is to be sent again."""
        lanes = self.lanes
        if isinstance(failure, Closed):
            self.fail(batch.calls, Unavailable(failure) if not batch.lost else AnswerLost(failure))
        elif isinstance(failure, ItemChanged):
            await self._condition_failed(batch, failure.current)
        elif isinstance(failure, Unavailable) and (batch.lost or isinstance(failure, AnswerLost)):
            batch.lost += 1  # (after a lost answer, still unknown whether an earlier send landed)
            if not batch.resendable:
                # sent without evidence, or its entry may be pruned early (skew): not re-sent
                self._give_up(batch, failure)
            elif batch.resend_allowed(lanes.clock()):
                await lanes.backoff.pause(0.02 * batch.lost)
                return True  # the same write again: its evidence lets it land only once
            else:
                await self._decide(batch)
        elif isinstance(failure, Unavailable):
            await self._unavailable(batch, failure)
        else:  # not a DynamoDB answer: nothing more to learn here
            self.fail(batch.calls, failure)
        return False

    def landed(self, batch: Batch, image: BucketImage) -> None:
        self.image, self.exists = image, True
        holds_seen.landed(self.lanes, self.key, batch.writes, image, batch.now)
        self.lanes.on_image(image, True)
        seq = batch.evidence.seq
        for call, writes in zip(batch.calls, batch.plans, strict=True):
            target = evolve(call.target, image=image, exists=True)
            call.resolve(Outcome(target, image=image, writes=writes, seq=seq), self.lanes.on_orphan)

    async def _condition_failed(self, batch: Batch, current: BucketImage | None) -> None:
        lanes = self.lanes
        holds_seen.refused(lanes, self.key, batch.writes, current)
        if current is not None:
            lanes.on_image(current, False)
        if batch.lost and current is not None:
            found: Decided | None = decide(current, lanes.writer, batch.evidence.seq)
            if found is Decided.NOT_LANDED:
                found, current = await self._fence(batch, current)
            if found is None:
                await self._decide(batch)  # the fence kept losing its answers too
                return
            if found is Decided.UNKNOWN:
                self._give_up(batch, Undecided(ENTRY_REMOVED))
                return
            lanes.resolved_by_resend += 1
            if found is Decided.LANDED:
                assert current is not None
                self.landed(batch, current)  # the lost answer's write had landed
                return
        await self._not_landed(batch, current)

    async def _not_landed(
        self, batch: Batch, current: BucketImage | None, *, outage: bool = False
    ) -> None:
        """The batch certainly did not land (and cannot any more): plan its calls again on
        `current`, the item as found (None: gone). After an `outage` (re-sending kept failing)
        only its exit writes and refunds go again; its admissions fail, nothing debited."""
        if outage:
            cause = TimeoutError("its answers kept being lost and it did not land")
            self.fail([c for c in batch.calls if not c.settle], Unavailable(cause))
        if current is None and batch.image.shard != 0 and self.lanes.recover is not None:
            try:  # a split left unfinished: finish it
                current = await self.lanes.recover(batch.image)
            except Unavailable as exc:  # the batch did not land: nothing of its calls was debited
                await self._unavailable(batch, Unavailable(exc))
                return
        if current is None and batch.image.shard != 0 and not any(c.settle for c in batch.calls):
            # A split bucket's shard is gone (its entity was deleted): only the slow path, from
            # shard 0, creates a bucket, never on a layout this process remembers.
            self.fail(batch.calls, ShardGone())
            return
        if current is None:  # expired and deleted: create it again
            self.image, self.exists = self.lanes.blank(batch.image), False
        else:
            if self.lanes.rules_matter(batch.image, current):
                # The calls chose their items under other rules; an exit write or a refund
                # only changes what it landed, so it is planned again on the new rules.
                self.fail([c for c in batch.calls if not c.settle], RulesChanged())
            self.image, self.exists = current, True
        self._retry(batch, self.image)

    async def _fence(
        self, batch: Batch, current: BucketImage
    ) -> tuple[Decided | None, BucketImage | None]:
        """After a lost answer and a failed re-send that found the write not landed: make its
        sequence unusable, so no late copy of it can land once its calls are planned again.
        Returns what the fence decided (None: its answers kept being lost) and the item after
        it or as found (None: gone)."""
        lanes = self.lanes
        seq = batch.evidence.seq
        fence = Evidence(lanes.writer, lanes.next_seq(lanes.clock(), current))
        for attempt in range(UNKNOWN_RESENDS + 1):
            if lanes.closed:
                break
            lanes.load.writes += 1
            try:
                image = await lanes.sender.fence(current, fence, seq)
            except ItemChanged as changed:
                seen = changed.current
                if seen is None:
                    return Decided.NOT_LANDED, None  # gone: an update cannot land on no item
                lanes.on_image(seen, False)
                entry = seen.evidence.get(lanes.writer)
                if entry is not None and entry >= fence.seq:
                    return Decided.NOT_LANDED, seen  # the fence had landed (its answer lost)
                found = decide(seen, lanes.writer, seq)
                if found is not Decided.NOT_LANDED:
                    return found, seen  # landed just before the fence, or its entry removed
                current = seen  # the item changed shape under the fence: fence it as it is
                continue
            except Unavailable:  # a lost answer too
                await lanes.backoff.pause(0.02 * (attempt + 1))
                continue
            lanes.on_image(image, False)
            return Decided.NOT_LANDED, image
        return None, None

    async def _decide(self, batch: Batch) -> None:
        """Re-sending kept losing its answer: decide from this writer's entry on the item, read
        strongly consistent (then fenced if the write has not landed), trying again with backoff
        for as long as the table does not answer. Only `close()` ends it undecided, and only an
        entry another writer removed (the item's floor at or above the write) stays undecided."""
        lanes = self.lanes
        seq = batch.evidence.seq
        told = AnswerLost(Undecided("its answers were lost; it is decided off the caller's path"))
        for call in batch.calls:  # callers of admissions are told now (what lands is refunded)
            if not call.settle and not call.future.done():
                call.future.set_result(Outcome(call.target, error=told))
        tries = 0
        while not lanes.closed:
            tries += 1
            try:
                found = await lanes.sender.read(batch.image)
            except Unavailable:
                await lanes.backoff.pause(outage_pause(tries))
                continue
            entry = None if found is None else found.evidence.get(lanes.writer)
            if found is not None:
                lanes.on_image(found, False)
                if entry == seq:
                    lanes.resolved_by_read += 1
                    self.landed(batch, found)
                    return
                if entry is None and decide(found, lanes.writer, seq) is Decided.UNKNOWN:
                    self._give_up(batch, Undecided(ENTRY_REMOVED))
                    return
            # (an entry above `seq` is a fence of this writer's that landed: not landed)
            if found is not None and (entry is None or entry < seq):
                lanes.load.writes += 1
                try:  # not landed so far: make sure no copy of it lands later
                    fence = Evidence(lanes.writer, lanes.next_seq(lanes.clock(), found))
                    found = await lanes.sender.fence(found, fence, seq)
                except ItemChanged as changed:
                    found = changed.current
                    if found is not None:
                        lanes.on_image(found, False)
                        if found.evidence.get(lanes.writer) == seq:  # a late copy just landed
                            lanes.resolved_by_read += 1
                            self.landed(batch, found)
                            return
                    continue  # read again: the item changed under the fence (a removal?)
                except Unavailable:
                    await lanes.backoff.pause(outage_pause(tries))
                    continue  # the fence's own outcome is unknown: read again
                else:
                    lanes.on_image(found, False)
            # gone, or holding our fence (or a later one): it did not land and cannot any more
            lanes.resolved_by_read += 1
            await self._not_landed(batch, found, outage=True)
            return
        self.fail(batch.calls, AnswerLost(Closed()))

    def _retry(self, batch: Batch, image: BucketImage) -> None:
        """Put the batch's calls back at the front, to plan again on `image` at the same time.
        An exit write or refund is never given up: each failed condition means another writer's
        write landed, so it goes again at once (pausing would hold up the item's other calls)."""
        retry: list[Call] = []
        for call in batch.calls:
            if call.future.done():
                continue  # its caller left and nothing of it landed: drop it
            call.tries += 1
            call.conflicts += 1
            if call.conflicts >= call.rounds and not call.settle:
                # on the item as found: the refusal judges it there
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
        """Certainly not applied: exit writes and refunds wait and go again (never given up
        while the process lives); a debit throttled while it can still be decided before its
        deadline goes again; other admissions fail (their callers apply `on_unavailable`)."""
        retry: list[Call] = []
        load = self.lanes.load
        soon = load.now_ms() + load.slow_rtt_ms(self.rtt_ms or load.rtt_ms)
        for call in batch.calls:
            call.tries += 1
            if call.future.done() or self.lanes.closed:
                again = False
            elif call.settle:
                again = True
            else:
                in_time = call.in_time(soon + 50 * call.tries)
                again = exc.throttled and in_time and call.tries < call.rounds
            if again:
                retry.append(call)
            else:
                call.resolve(Outcome(call.target, error=exc), self.lanes.on_orphan)
        if retry:
            debits = [c.tries for c in retry if not c.settle]
            tries = max(c.tries for c in retry)
            await self.lanes.backoff.pause(0.05 * max(debits) if debits else outage_pause(tries))
            self.queue.extendleft(reversed(retry))

    def _give_up(self, batch: Batch, cause: BaseException) -> None:
        self.lanes.undecided += 1
        image = batch.image
        log.warning(
            "write outcome undecided after %d lost answers on item %s/%s shard %d of namespace %s "
            "(writer %s, sequence %d): %s",
            batch.lost,
            image.entity_id,
            image.resource,
            image.shard,
            namespace_labels.label(image.ns),
            self.lanes.writer,
            batch.evidence.seq,
            cause,
        )
        holds_seen.undecided(self.lanes, self.key, batch.writes)
        # Whatever the last answer said, an earlier send may have landed.
        error = cause if isinstance(cause, AnswerLost) else AnswerLost(cause)
        self.fail(batch.calls, error)

    def fail(self, calls: list[Call], error: BaseException) -> None:
        for call in calls:
            if not call.future.done():
                call.future.set_result(Outcome(call.target, error=error))
