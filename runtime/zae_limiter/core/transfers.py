"""Transfers of capacity between regional shards (docs/multi-region.md). Pure.

A Region whose own shards run dry takes capacity from another Region's shard: the donor *gives*
an amount (a write guarded like a debit, so it never goes below zero) and the recipient *takes*
it (a write guarded like a refund). Neither is consumption: usage snapshots, alerts and the
consumption counters see nothing. Between the two writes the amount is in neither shard, never
in both (`acquire.transfers` makes the pair exactly once).

* A quota moves its ceiling with it: the donor's top-ups (`tu`) go down by the amount, the
  recipient's up, until the period's reset gives every shard its share again; so the shares
  still sum to the allowance plus the top-ups, to the milli-unit. A recipient whose period is no
  longer the donor's takes nothing (the amount ended with the period, as a refund would).
* A dripping limit's refill stays where it is; the recipient takes what fits below its ceiling
  (`moves` never asks for more), and anything above it is lost as refill above a ceiling is.
"""

from __future__ import annotations

from collections.abc import Mapping

from .bucket import Guard, Kind, LimitWrite, Params, State, plan_debit, view
from .evolve import evolve
from .shares import MILLI, Slot


def available(params: Params, state: State, now: int, slot: Slot) -> int:
    """What a shard can give of one limit now (milli): its balance above zero (a concurrency
    limit gives nothing: what it holds belongs to leases)."""
    if params.kind == Kind.CONCURRENT or params.soft:
        return 0
    return max(0, view(params, state, now, slot).balance)


def room(params: Params, state: State, now: int, slot: Slot) -> int | None:
    """What a shard can take of one limit (milli); None: no bound (a quota's ceiling rises)."""
    if params.kind != Kind.RATE:
        return None
    current = view(params, state, now, slot)
    return max(0, current.ceiling - current.balance)


def give(params: Params, state: State, now: int, slot: Slot, amount: int) -> LimitWrite | None:
    """The donor's write of `amount` (milli); None when its balance cannot cover it."""
    write = plan_debit(params, state, now, slot, amount, enforce=True)
    if write is None:
        return None
    result = evolve(write.result, consumed=state.consumed, overdrawn=state.overdrawn)
    write = evolve(write, consumed=0, overdrawn=0, result=result)
    if params.kind == Kind.RATE:
        return write
    if write.set_tu is not None:  # the write opens the period: its top-ups start below zero
        tu = write.set_tu - amount
        return evolve(write, set_tu=tu, result=evolve(result, tu=tu))
    return evolve(write, add_tu=-amount, result=evolve(result, tu=state.tu - amount))


def take(
    params: Params, state: State, now: int, slot: Slot, amount: int, period: int | None
) -> tuple[LimitWrite, int]:
    """The recipient's write of `amount` (milli) given in the quota period `period`, and what
    it takes (milli): all of it, but a dripping limit only up to its ceiling and a quota nothing
    when its period is no longer `period`."""
    if params.kind == Kind.RATE:
        t_a = now * params.shard_refill(slot)
        step = amount * params.period_ms
        if state.v >= t_a + step:
            write = LimitWrite(
                (Guard("v", ">=", t_a + step),), add_v=-step, result=evolve(state, v=state.v - step)
            )
            return write, amount
        taken = max(0, state.v - t_a) // params.period_ms  # what its debt leaves room for
        write = LimitWrite((Guard("v", "<", t_a + step),), set_v=t_a, result=evolve(state, v=t_a))
        return write, taken
    current = view(params, state, now, slot)
    if current.fresh_period or current.period is None or current.period != period:
        return LimitWrite(result=state), 0
    result = evolve(state, v=state.v + amount, tu=state.tu + amount)
    return LimitWrite(
        (Guard("w", "=", period),), add_v=amount, add_tu=amount, result=result
    ), amount


def period_of(params: Params, state: State, now: int, slot: Slot) -> int | None:
    """The quota period a donor's write at `now` falls in (None: a dripping limit)."""
    if params.kind == Kind.RATE:
        return None
    current = view(params, state, now, slot)
    if current.fresh_period and params.kind == Kind.SESSION:
        return now  # the give opens a session there now
    return current.period


def moves(
    wanted: Mapping[str, int],
    can_give: Mapping[str, int],
    can_take: Mapping[str, int | None],
) -> dict[str, int]:
    """How much of each limit to move (milli): what is wanted (a call's shortfall on the
    recipient), or half of what the donor can give when that is more, never more than the donor
    can give nor the recipient take. A limit the recipient can take without bound (a quota)
    moves in whole units, as quota shares are. {} when some limit wanted cannot be covered."""
    out: dict[str, int] = {}
    for name, want in wanted.items():
        if want <= 0:
            continue
        most = can_give.get(name, 0)
        limit = can_take.get(name)
        if limit is not None:
            most = min(most, limit)
        amount = max(want, min(most, can_give.get(name, 0) // 2))
        if limit is None:  # whole units: at least the shortfall, at most what can be given
            amount = max(-(-want // MILLI), amount // MILLI) * MILLI
        if amount > most:
            return {}
        out[name] = amount
    return out
