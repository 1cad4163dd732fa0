"""A writer's lanes under load (docs/on-unavailable.md "Overload").

`wait_ms`: how long a new call on an item would take to be decided; `reserved`: what this
writer's debits in flight on it take, and those on their way to its lane (`sending`). The
admission sheds a call that cannot be decided before its deadline, and refuses (429) one the
item's fresh image less `reserved` cannot admit, before anything of it is sent. `fold`: a refund
for a caller that left is queued on its item's lane without being sent
(`Lanes.write(fold=True)`); the next call on the item sends it in its own write, or `flush`
sends it alone after `FOLD_WAIT_S`.
"""

from __future__ import annotations

import asyncio

from ..caches import ImageCache
from .lanes import MAX_BATCH, Lanes
from .values import Target

Key = tuple[str, str, str, int]
#: How long a folded refund waits for its item's next write.
FOLD_WAIT_S = 0.25


def fold(lanes: Lanes, keys: list[Key]) -> None:
    """Refunds are about to be queued on these items, folded: send them after `FOLD_WAIT_S` if
    no call has."""
    loop = asyncio.get_running_loop()
    for key in keys:
        loop.call_later(FOLD_WAIT_S, flush, lanes, key)


def flush(lanes: Lanes, key: Key) -> None:
    """Send what is queued on an idle lane (a folded refund no call came for)."""
    lane = lanes.by_item.get(key)
    if lane is not None and not lane.busy and lane.queue:
        lane.busy = True
        lane.release()


def wait_ms(lanes: Lanes, key: Key, now: float) -> float:
    """How long a new call on the item waits for the writes ahead of its own, plus its own round
    trip (ms): what is left of the write in flight, and a round trip per batch queued ahead of
    it (the item's smoothed round trip, or the writer's when the item is idle, taken as slow as
    most answers come: `Load.slow_rtt_ms`), each after its turn while the table is paced."""
    load = lanes.load
    lane = lanes.by_item.get(key)
    if lane is None or not lane.busy:
        return load.slow_rtt_ms(load.rtt_ms)
    rtt = load.slow_rtt_ms(lane.rtt_ms or load.rtt_ms)
    turn = load.turn_ms(now)  # while paced, a lane's batches take turns
    sent = lane.sent_at
    left = turn + rtt if sent is None else max(0.0, rtt - (now - sent * 1000))
    return left + (len(lane.queue) // MAX_BATCH + 1) * (turn + rtt)


def reserved(lanes: Lanes, key: Key) -> dict[str, int] | None:
    """Milli per limit that this writer's debits on the item take: those of its write in
    flight, those on their way to the item's lane (`sending`), and while the table is paced
    those queued on the lane after their turn (they will be sent); None when there are none.
    Other calls queued behind the write in flight do not count: until they are sent their
    callers may leave, and a debit that never lands must not refuse anyone."""
    lane = lanes.by_item.get(key)
    coming = lanes.sending.get(key)
    if lane is None and coming is None:
        return None
    out: dict[str, int] = {}
    calls = [] if lane is None else [*lane.flying, *(c for c in lane.queue if c.turned)]
    targets = [c.target for c in calls if not (c.settle or c.future.done())]
    for target in [*targets, *(coming or ())]:
        for name, amount in target.amounts.items():
            out[name] = out.get(name, 0) + amount
    return out or None


def sending(lanes: Lanes, targets: list[Target]) -> None:
    """A call's debits are on their way to their lanes (past the rejection cache, maybe waiting
    for their turn): they count on their items (`reserved`) until each is in its lane
    (`Lanes.write`) or `not_sent`."""
    for target in targets:
        lanes.sending.setdefault(ImageCache.key_of(target.image), []).append(target)


def not_sent(lanes: Lanes, targets: list[Target]) -> None:
    """Drop what of `sending(targets)` never reached a lane (shed, the caller left, or the call
    was decided without it)."""
    for target in targets:
        lanes.arrived(ImageCache.key_of(target.image), target)
