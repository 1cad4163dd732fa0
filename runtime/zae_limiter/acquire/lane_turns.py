"""A lane's next batch under load (docs/on-unavailable.md "Overload").

Before a lane forms a batch after waiting (for the write in flight, or in a background drain)
or with several calls queued, `ready` drops the debits whose deadline passed while they waited:
their callers were answered "unavailable", and a debit sent now would be written and then
refunded. While the table is paced, a batch of several calls waits for a turn of its own (its
calls took turns only for the writes they add: `load`); a turn that would come too late for
every debit in it is not taken, and those debits are shed, nothing sent. Exit writes and
refunds are never shed: a batch holding one waits for its turn whenever it comes.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from .lane_calls import MAX_BATCH, Call, Outcome
from .lane_failures import Writer
from .load import Load
from .values import Overloaded


class Lane(Protocol):
    """What `ready` needs of a lane (`lanes._Lane`)."""

    @property
    def lanes(self) -> Writer: ...

    queue: deque[Call]
    rtt_ms: float


async def ready(lane: Lane) -> bool:
    """Shed what the lane cannot decide in time, then wait for its batch's turn; False when
    something was shed at the turn (the lane looks at its queue again)."""
    load = lane.lanes.load
    now = load.now_ms()
    _drop_late(lane, now)
    if load.rate is None:
        return True
    live = [c for c in lane.queue if not c.future.done()][:MAX_BATCH]
    if len(live) < 2:
        return True
    debits = [c for c in live if not c.settle]
    rtt = load.slow_rtt_ms(lane.rtt_ms or load.rtt_ms)
    latest = None
    if len(debits) == len(live) and all(c.deadline is not None for c in debits):
        latest = max(c.deadline for c in debits if c.deadline is not None) - rtt
    try:
        delay = load.turn(1, now, latest)
    except Overloaded as exc:
        _shed(load, debits, exc)
        return False
    if delay > 0:
        await lane.lanes.backoff.pause(delay / 1000)
        _drop_late(lane, load.now_ms())
    return True


def _drop_late(lane: Lane, now: float) -> None:
    late = [
        c
        for c in lane.queue
        if not (c.settle or c.future.done()) and c.deadline is not None and c.deadline <= now
    ]
    if late:
        rtt = lane.lanes.load.slow_rtt_ms(lane.rtt_ms)
        _shed(lane.lanes.load, late, Overloaded(rtt, 0.0))


def _shed(load: Load, calls: list[Call], error: Overloaded) -> None:
    """Tell `calls` they were shed (nothing of them was sent); `_form` drops them."""
    for call in calls:
        call.future.set_result(Outcome(call.target, error=error))
    load.shed += len(calls)
