"""What a lane's writes tell this writer's ledger of concurrency holds (core.hold_ledger): the
entries a write landed on, the item a refused write returned, the creations left undecided."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from ..core.bounds import ASSUMED_SKEW_MS
from ..core.bucket import LimitWrite
from ..core.hold_ledger import Ledger
from ..core.images import BucketImage


class LedgerHolder(Protocol):
    """The lanes of one writer: its ledger and its clock."""

    ledger: Ledger
    clock: Callable[[], int]


def ledger_for(writer: str) -> Ledger:
    """A writer's ledger: an entry is freed by age only past the clock skew the rules assume."""
    return Ledger(writer, ASSUMED_SKEW_MS)


def landed(
    lanes: LedgerHolder, item: Hashable, writes: dict[str, LimitWrite], image: BucketImage, now: int
) -> None:
    """A write planned at `now` landed; `image` is the item it returned (received now)."""
    received = lanes.clock()
    for name, write in writes.items():
        if write.holds is not None:
            seen = image.states[name].holds if name in image.states else ()
            lanes.ledger.landed(item, name, write.holds, now, seen, received)


def refused(
    lanes: LedgerHolder, item: Hashable, writes: dict[str, LimitWrite], current: BucketImage | None
) -> None:
    """A write's condition failed; `current` is the item it returned (None: gone, so it holds
    no entry). A write that landed after all (a lost answer) is told again by `landed`."""
    received = lanes.clock()
    for name, write in writes.items():
        if write.holds is not None:
            state = None if current is None else current.states.get(name)
            lanes.ledger.saw(item, name, () if state is None else state.holds, received)


def undecided(lanes: LedgerHolder, item: Hashable, writes: dict[str, LimitWrite]) -> None:
    """A write given up on with its outcome unknown: a generation it created may exist
    unseen, so it is never written again."""
    for name, write in writes.items():
        if write.holds is not None and write.holds.create:
            lanes.ledger.dropped(item, name, write.holds.key)
