"""Concurrency holds: what a concurrency limit's bucket item holds, and when a hold can expire.

Pure: no I/O, integers only (amounts in milli-units, times in epoch milliseconds).

A concurrency limit (`Limit.concurrent`, docs/concurrency.md) is stored in the item's limit map
like any limit (``L.<name>``) with, besides the total ``v``:

- ``h``: map of *entry* -> amount held (milli). An entry is one holder process's holds on this
  item under one generation: ``<writer id>.<generation>`` (`entry_key`);
- ``he``: map of entry -> its expiry (epoch ms, on the holder's clock): the holder renews it
  while a lease holds something there, and lets it lapse otherwise.

``v`` is always the sum of ``h`` (every write changes both together), and every write that adds
to ``v`` is guarded by ``v <= capacity - amount + freed``, so the amount recorded never exceeds
the capacity. A writer removes the entries of other holders whose expiry has passed by more than
the clock skew the project assumes (`expired`), or that it has itself seen unchanged for longer
than the lease_ttl (elapsed time on one clock, whatever the skew: `quiet`, the exact entry as
seen, never a newer one a later image shows under the same key), each guarded to be unchanged
since the image it planned from, and counts what it freed in the same write: no read is ever
needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: Attribute (in ``L.<limit>``) mapping each entry to the amount it holds (milli).
HOLDS_ATTR = "h"
#: Attribute (in ``L.<limit>``) mapping each entry to its expiry (epoch ms, holder's clock).
EXPIRIES_ATTR = "he"
#: A holder renews an entry when this fraction of the lease_ttl has passed since it last wrote it.
RENEW_DIVISOR = 3
#: The wait reported when a request can never fit (more than the capacity).
NEVER_MS = 10**12


@dataclass(frozen=True)
class Hold:
    """One entry of a concurrency limit on one item: `amount` (milli) held until `expiry`."""

    key: str
    amount: int
    expiry: int

    @property
    def holder(self) -> str:
        """The writer id of the process that holds it."""
        return holder_of(self.key)


@dataclass(frozen=True)
class HoldWrite:
    """How one write changes a concurrency limit's entries.

    `key`: the writer's entry this write adds `add` to (milli, signed; "" for none); `create`:
    that entry is new (set, unguarded: its generation was never written) rather than guarded to
    still exist; `drop`: the write gives back all the entry holds (it holds exactly `-add`), so
    it removes the entry instead of leaving it at 0. `renew`: the writer's other entries,
    guarded to exist. Every entry written gets `expiry`. `reap`: other holders' expired
    entries, removed if still exactly as seen.
    """

    key: str = ""
    add: int = 0
    create: bool = False
    expiry: int = 0
    renew: tuple[str, ...] = ()
    reap: tuple[Hold, ...] = ()
    drop: bool = False

    @property
    def freed(self) -> int:
        return sum(h.amount for h in self.reap)


def entry_key(writer: str, generation: int) -> str:
    """The entry of `writer`'s holds under `generation` (a new generation once one is lost)."""
    return f"{writer}.{generation}"


def holder_of(key: str) -> str:
    return key.rsplit(".", 1)[0]


def expired(hold: Hold, now: int, skew_ms: int) -> bool:
    """Whether any writer may remove `hold` at `now` (its own clock): past its expiry on every
    clock within `skew_ms` of this one, so its holder, whose clock set the expiry, already
    counts it as lapsed."""
    return now > hold.expiry + skew_ms


def lapsed(hold: Hold, now: int) -> bool:
    """Whether the holder itself (at `now` on its clock) must count `hold` as lost."""
    return now >= hold.expiry


def reapable(
    holds: tuple[Hold, ...],
    now: int,
    skew_ms: int,
    keep: frozenset[str] = frozenset(),
    quiet: frozenset[Hold] = frozenset(),
    lapsed: frozenset[str] = frozenset(),
) -> tuple[Hold, ...]:
    """The entries a write at `now` removes, other than those in `keep`: expired ones, the
    `quiet` ones (this writer saw exactly them unchanged for longer than the lease_ttl, on its
    own clock: their holder's clock passed their expiry whatever its skew; the same key with
    another amount or expiry was written since, and is not quiet), and the writer's own
    `lapsed` entries (their leases already count them as lost)."""
    return tuple(
        h
        for h in holds
        if h.key not in keep
        and (h in quiet or h.key in lapsed or now > h.expiry + skew_ms)  # expired()
    )


def held(total: int, holds: tuple[Hold, ...], now: int, skew_ms: int) -> int:
    """What counts as held at `now`: the recorded total less what expired entries hold."""
    return total - sum(h.amount for h in holds if expired(h, now, skew_ms))


def available(capacity: int, total: int, holds: tuple[Hold, ...], now: int, skew_ms: int) -> int:
    """What a new hold can take at `now` (milli; negative when more is held than the capacity
    allows, e.g. after the capacity was lowered)."""
    return capacity - held(total, holds, now, skew_ms)


@dataclass(frozen=True)
class Outlook:
    """What one writer knows of an item's concurrency limit beyond its image, for the wait a
    refusal reports (spec §5.19).

    `ttl_ms`: the limit's lease_ttl (None: unknown, entries come free only past their expiry
    plus the skew); `lasting_ms`: how long this writer's recent holds there lasted (None: none
    yet); `seen`: others' entries exactly as this writer first saw them -> when (its clock; an
    entry missing was first seen in this image); `own`: the prefix of this writer's entry keys;
    `lapsed`: this writer's entries its leases count as lost.
    """

    skew_ms: int = 0
    ttl_ms: int | None = None
    lasting_ms: int | None = None
    seen: Mapping[Hold, int] = field(default_factory=dict)
    own: str = ""
    lapsed: frozenset[str] = frozenset()


def frees_at(hold: Hold, now: int, outlook: Outlook) -> int:
    """When `hold` comes back at the earliest, as far as this writer can tell (its clock):

    - this writer's own entry: at its expiry (its next write then removes it); now if lapsed;
    - another's entry past its expiry (not renewed for a lease_ttl: its process died or lost
      DynamoDB): when this writer may remove it, its expiry plus the skew or a lease_ttl after
      it first saw it as it is, whichever comes first (first seen in this image: a lease_ttl
      from now, unless the expiry says sooner);
    - a live entry: as long from now as this writer's recent holds on the item lasted, never
      past the bound above (a lease_ttl bounds a hold whose holder stops; it is no estimate of
      when a live one ends).
    """
    if outlook.own and hold.key.startswith(outlook.own):  # lapses at its expiry, this clock
        bound = now if hold.key in outlook.lapsed else max(now, hold.expiry)
    else:  # removable past its expiry plus the skew, or quiet for a lease_ttl (`reapable`)
        bound = hold.expiry + outlook.skew_ms
        if outlook.ttl_ms is not None:
            bound = min(bound, outlook.seen.get(hold, now) + outlook.ttl_ms)
        bound = max(now, bound + 1)
    if hold.expiry > now and outlook.lasting_ms is not None:  # live: it ends as holds do here
        return min(bound, now + max(1, outlook.lasting_ms))
    return bound


def retry_after_ms(
    capacity: int,
    total: int,
    holds: tuple[Hold, ...],
    now: int,
    requested: int,
    skew_ms: int = 0,
    outlook: Outlook | None = None,
) -> int:
    """How long until `requested` fits: until enough of what is recorded comes back
    (`frees_at`, from what `outlook` knows; without one, each entry past its expiry plus
    `skew_ms`). 0 only when it fits with every entry counted; at least 1 ms otherwise, so a
    refusal never says "retry now" while nothing can be freed; NEVER_MS when it never can (more
    than the capacity, or more recorded than the entries explain)."""
    if requested > capacity:
        return NEVER_MS
    short = total + requested - capacity
    if short <= 0:
        return 0
    known = outlook if outlook is not None else Outlook(skew_ms=skew_ms)
    for at, amount in sorted((frees_at(h, now, known), h.amount) for h in holds if h.amount > 0):
        short -= amount
        if short <= 0:
            return max(1, at - now)
    return NEVER_MS  # more recorded than the entries explain: only given-back holds help


def holds_from_item(raw: dict[str, object]) -> tuple[Hold, ...]:
    """The entries of a concurrency limit's stored map (plain form, ``L.<limit>``); none for
    other limits."""
    amounts = raw.get(HOLDS_ATTR) or {}
    expiries = raw.get(EXPIRIES_ATTR) or {}
    assert isinstance(amounts, dict) and isinstance(expiries, dict)
    return tuple(
        Hold(str(key), int(amount), int(expiries.get(key, 0)))
        for key, amount in sorted(amounts.items())
    )


def holds_to_item(holds: tuple[Hold, ...]) -> dict[str, dict[str, int]]:
    """The stored maps of a concurrency limit's entries (both present, even when empty, so
    that writes can set an entry inside them)."""
    return {
        HOLDS_ATTR: {h.key: h.amount for h in holds},
        EXPIRIES_ATTR: {h.key: h.expiry for h in holds},
    }
