"""The write plans of a concurrency limit: take a hold, give it back, renew it (core.holds).

Pure: no I/O. Each plan is one `LimitWrite` of the item's single conditional write, so a hold is
admitted all or none with the call's other limits, and a renewal or a give-back rides along with
whatever else the writer writes to the item.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import holds
from .bucket import Guard, LimitWrite, Params, State
from .evolve import evolve
from .holds import Hold, HoldWrite
from .shares import Slot


@dataclass(frozen=True)
class Holder:
    """The writing process's side of one concurrency limit on one item.

    `key`: the entry this write uses; `create`: it was never written (set, not added to);
    `renew`: the writer's other live entries here (renewed by every write it makes);
    `expiry`: the expiry every entry written gets (now + lease_ttl on the writer's clock);
    `skew_ms`: the clock skew allowed between writers (an entry is removed only that long after
    its expiry); `quiet`: others' entries exactly as this writer saw them unchanged for over
    the lease_ttl; `lapsed`: this writer's own entries its leases count as lost.
    """

    key: str
    create: bool
    expiry: int
    skew_ms: int
    renew: tuple[str, ...] = ()
    quiet: frozenset[Hold] = frozenset()
    lapsed: frozenset[str] = frozenset()

    @property
    def own(self) -> frozenset[str]:
        return frozenset((self.key, *self.renew))


def plan_hold(
    params: Params,
    state: State,
    now: int,
    slot: Slot,
    amount: int,
    holder: Holder,
    *,
    enforce: bool,
    check: bool = True,
) -> LimitWrite | None:
    """Add `amount` (milli, signed: negative gives back) to the holder's entry, renewing the
    holder's entries and removing others' expired ones. A positive amount is guarded (when
    `enforce`) so that the total recorded stays within the capacity; None when `check` is set
    and the image shows it cannot fit (a stale image is not trusted to refuse)."""
    reap = holds.reapable(state.holds, now, holder.skew_ms, holder.own, holder.quiet, holder.lapsed)
    cap = params.shard_capacity(slot)
    freed = sum(h.amount for h in reap)
    if enforce and amount > 0 and check and (amount > cap or cap - (state.v - freed) < amount):
        return None
    held = next((h.amount for h in state.holds if h.key == holder.key), None)
    change = HoldWrite(
        key=holder.key,
        add=amount,
        create=holder.create,
        expiry=holder.expiry,
        renew=holder.renew,
        reap=reap,
        drop=amount < 0 and not holder.create and held == -amount,  # nothing left held on it
    )
    guards: tuple[Guard, ...] = ()
    if enforce and amount > 0:
        guards = (Guard("v", "<=", cap - amount + freed),)
    return LimitWrite(
        guards,
        add_v=amount - freed,
        consumed=amount - freed,
        result=_after(state, change),
        holds=change,
    )


def plan_renew(state: State, now: int, holder: Holder) -> LimitWrite:
    """Renew the holder's entries (nothing added), removing others' expired ones on the way."""
    renew = holder.renew if holder.create else (holder.key, *holder.renew)
    reap = holds.reapable(state.holds, now, holder.skew_ms, holder.own, holder.quiet, holder.lapsed)
    change = HoldWrite(expiry=holder.expiry, renew=renew, reap=reap)
    return LimitWrite(
        add_v=-change.freed,
        consumed=-change.freed,
        result=_after(state, change),
        holds=change,
    )


def _after(state: State, change: HoldWrite) -> State:
    """The state a hold write leaves if it lands."""
    gone = {h.key for h in change.reap}
    entries: list[Hold] = []
    found = False
    for hold in state.holds:
        if hold.key in gone or (change.drop and hold.key == change.key):
            continue
        if hold.key == change.key:
            found = not change.create
            amount = hold.amount + change.add if found else change.add
            hold = Hold(hold.key, amount, change.expiry)
        elif hold.key in change.renew:
            hold = Hold(hold.key, hold.amount, change.expiry)
        entries.append(hold)
    if change.key and not change.drop and not found and all(h.key != change.key for h in entries):
        entries.append(Hold(change.key, change.add, change.expiry))
    freed = change.freed
    return evolve(
        state,
        v=state.v + change.add - freed,
        consumed=state.consumed + change.add - freed,
        holds=tuple(entries),
    )
