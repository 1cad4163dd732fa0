"""How a bucket's limits are divided between its shards (write sharding, docs/sharding.md). Pure.

A bucket with `n` shards (a power of two) is the result of splitting: shard `s` of `n` becomes
shards `s` and `s + n` of `2n`. Every amount a shard holds is divided the same way at every
split, so a shard's share is defined by its path of halvings from the undivided amount:

* capacity (and a quota's allowance, and its top-ups) is halved in **whole units**: the second
  half gets ``floor(units / 2)`` units, the first half the rest. Shares sum to the whole exactly,
  never hold a fraction of a unit that whole-unit requests could not use, and a limit smaller
  than the shard count lives on only as many shards as it has units (the others hold 0);
* a dripping limit's refill is halved to the milli-unit, except that a half that holds no
  capacity gets no refill (the first half keeps it all), so refill is never wasted on a shard
  that can never admit.

The two shares of a split always sum to the share they came from, so a split moves balance
between two shards and never changes the entity-wide ceilings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

MILLI = 1000


@dataclass(frozen=True)
class Slot:
    """One shard of a bucket: its index and the bucket's shard count."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        assert self.count >= 1 and self.count & (self.count - 1) == 0, self.count
        assert 0 <= self.index < self.count, (self.index, self.count)

    @property
    def halvings(self) -> Iterator[bool]:
        """From the undivided bucket down to this shard: at each split, whether this shard
        descends from the first half (the shard that stays) or the second (the new sibling)."""
        step = 1
        while step < self.count:
            yield self.index & step == 0
            step *= 2

    def all(self) -> list[Slot]:
        """Every shard of this slot's bucket."""
        return [Slot(i, self.count) for i in range(self.count)]


WHOLE = Slot()


def halves(amount: int) -> tuple[int, int]:
    """`amount` (milli, >= 0) split at a shard split: the second half gets whole units only."""
    second = (max(0, amount) // (2 * MILLI)) * MILLI
    return amount - second, second


def share(total: int, slot: Slot) -> int:
    """This shard's share of an amount divided in whole units (capacity, allowance, top-ups)."""
    amount = total
    for first in slot.halvings:
        a, b = halves(amount)
        amount = a if first else b
    return amount


def refill_share(capacity: int, refill: int, slot: Slot) -> int:
    """This shard's share of a dripping limit's refill: halved alongside the capacity, all of it
    kept by the first half when the second half holds no capacity."""
    cap, rate = capacity, refill
    for first in slot.halvings:
        a, b = halves(cap)
        given = 0 if b == 0 else rate // 2  # a half with no capacity earns no refill
        cap, rate = (a, rate - given) if first else (b, given)
    return rate


def split_balance(balance: int, first_ceiling: int, second_ceiling: int) -> tuple[int, int]:
    """A shard's balance (milli, may be negative) divided between the two shards of a split.

    The sibling gets about half in whole units, never more than its ceiling; the shard that
    stays keeps the rest (a negative balance stays whole with it), moving to the sibling
    whatever would exceed its own ceiling. The two always sum to `balance`.
    """
    _, half = halves(balance)
    second = min(half, max(0, second_ceiling))
    first = balance - second
    if first > first_ceiling:
        moved = min(first - first_ceiling, max(0, second_ceiling - second))
        first, second = first - moved, second + moved
    return first, second
