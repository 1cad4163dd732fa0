"""What a lane's writes tell this writer's ledger of concurrency holds (core.hold_ledger): the
entries a write landed on, the item a refused write returned, the creations left undecided."""

from __future__ import annotations

from collections.abc import Hashable

from ..core.bucket import LimitWrite
from ..core.hold_ledger import Ledger
from ..dynamo.bucket_items import BucketImage


def landed(
    ledger: Ledger,
    item: Hashable,
    writes: dict[str, LimitWrite],
    image: BucketImage,
    now: int,
    received: int,
) -> None:
    """A write planned at `now` landed; `image` is the item it returned (at `received`)."""
    for name, write in writes.items():
        if write.holds is not None:
            seen = image.states[name].holds if name in image.states else ()
            ledger.landed(item, name, write.holds, now, seen, received)


def refused(
    ledger: Ledger,
    item: Hashable,
    writes: dict[str, LimitWrite],
    current: BucketImage | None,
    received: int,
) -> None:
    """A write's condition failed; `current` is the item it returned (None: gone, so it holds
    no entry). A write that landed after all (a lost answer) is told again by `landed`."""
    for name, write in writes.items():
        if write.holds is not None:
            state = None if current is None else current.states.get(name)
            ledger.saw(item, name, () if state is None else state.holds, received)


def undecided(ledger: Ledger, item: Hashable, writes: dict[str, LimitWrite]) -> None:
    """A write given up on with its outcome unknown: a generation it created may exist
    unseen, so it is never written again."""
    for name, write in writes.items():
        if write.holds is not None and write.holds.create:
            ledger.dropped(item, name, write.holds.key)
