"""Splitting a bucket shard in two (write sharding, docs/sharding.md). Pure.

A shard `s` of a bucket with `n` shards becomes shards `s` and `s + n` of a bucket with `2n`.
Their ceilings and refill are the halves of the old shard's (`core.shares`), and each limit's
balance is divided between them exactly (`shares.split_balance`): the entity-wide total neither
grows nor shrinks, to the milli-unit, and a quota's halves are whole units. The old shard's
change is relative to its stored value, so writes that land between reading it and splitting it
are kept; it is guarded so that they can only spend the part the old shard keeps at the
split's time (never the part handed to the sibling, nor refill since that time, which the
sibling earns too), and so that a quota period they open is not left whole on the old shard
while the sibling opens it too (docs/sharding.md, "A split racing the old layout's writes").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .bucket import Guard, Kind, LimitWrite, Params, State, period_not_opened, view
from .shares import MILLI, Slot, halves, share, split_balance


def siblings(slot: Slot) -> tuple[Slot, Slot]:
    """The two shards `slot` becomes when its bucket's shard count doubles."""
    doubled = slot.count * 2
    return Slot(slot.index, doubled), Slot(slot.index + slot.count, doubled)


def too_small_to_double(limits: Iterable[Params], shards: int) -> Params | None:
    """The concurrency limit that a bucket of `shards` shards cannot be split for, because a
    shard of twice as many would hold a share below one unit (spec §5.19: the split stops
    there); None when every limit allows the doubling."""
    doubled = Slot(0, shards * 2).all()
    for params in limits:
        if params.kind == Kind.CONCURRENT and any(
            share(params.capacity, slot) < MILLI for slot in doubled
        ):
            return params
    return None


def split_limit(params: Params, state: State, now: int, slot: Slot) -> tuple[LimitWrite, State]:
    """(change to the old shard, state of its new sibling) when the shard count doubles."""
    if params.kind == Kind.RATE:
        return _split_rate(params, state, now, slot)
    if params.kind == Kind.CONCURRENT:
        # Holds cannot move between items: split only while nothing is held, so each half
        # starts empty at its share and the two shares sum to the old one (never over).
        return LimitWrite((Guard("v", "=", 0),), result=state), State(v=0)
    current = view(params, state, now, slot)
    kept, sibling = siblings(slot)
    if current.fresh_period:
        # The stored period is over: both halves start the next period at their new share,
        # provided no write opened it on the old shard (at the old share) since it was read.
        return LimitWrite((period_not_opened(params, current, now),)), replace(
            state, consumed=0, overdrawn=0, tu=0
        )
    tu_kept, tu_given = halves(state.tu)
    stay, given = split_balance(
        current.balance,
        params.shard_capacity(kept) + tu_kept,
        params.shard_capacity(sibling) + tu_given,
    )
    assert current.period is not None
    guards: tuple[Guard, ...] = (Guard("w", "=", current.period),)
    if not params.soft:  # writes since the read spend only what the old shard keeps (>= 0)
        guards += (Guard("v", ">=", state.v - max(0, stay)),)
    old = LimitWrite(
        guards,
        add_v=stay - state.v,
        add_tu=-tu_given,
        result=replace(state, v=stay, tu=tu_kept),
    )
    return old, State(v=given, w=state.w, tu=tu_given)


def _split_rate(params: Params, state: State, now: int, slot: Slot) -> tuple[LimitWrite, State]:
    """A dripping limit's balance, in scaled units (milli x period), divided exactly."""
    kept, sibling = siblings(slot)
    period = params.period_ms
    t_old = now * params.shard_refill(slot)
    scaled = params.shard_capacity(slot) * period - max(0, state.v - t_old)
    cap_kept = params.shard_capacity(kept) * period
    cap_given = params.shard_capacity(sibling) * period
    stay, given = _split_scaled(scaled, cap_kept, cap_given, period)
    target_v = now * params.shard_refill(kept) + cap_kept - stay
    sibling_v = now * params.shard_refill(sibling) + cap_given - given
    if state.v >= t_old:
        guards = [Guard("v", ">=", t_old)]
        if not params.soft:
            # Writes since the read spend only what the old shard keeps (`stay`, at `now`): a
            # debit dated after `now` spends refill the sibling also earns from `now`.
            guards.append(Guard("v", "<=", state.v + max(0, stay)))
        write = LimitWrite(tuple(guards), add_v=target_v - state.v)
    else:
        write = LimitWrite((Guard("v", "<", t_old),), set_v=target_v)
    return replace(write, result=replace(state, v=target_v)), State(v=sibling_v)


def _split_scaled(scaled: int, cap_kept: int, cap_given: int, period: int) -> tuple[int, int]:
    """`split_balance` on balances scaled by the period (whole units stay whole)."""
    whole, fraction = divmod(scaled, period)
    stay, given = split_balance(whole, cap_kept // period, cap_given // period)
    if stay * period + fraction > cap_kept:  # the kept half is full: the sibling has room
        return stay * period, given * period + fraction
    return stay * period + fraction, given * period
