"""A raised ceiling's headroom: what a raise added to a limit that refill has not paid yet.

Pure. A raise keeps the balance (`bucket.convert`), so right after it `capacity - balance`
counts the raise Δ as if it had been consumed. Threshold alerts measure consumption, so they
take off the part of Δ not refilled yet (docs/alerts.md):

- a dripping limit's refill pays the headroom first, at the rate in force: unrefilled(t) =
  max(0, Δ - refill since the raise), stored as a clock like the debt clock `v`
  (``h = t0*A + Δ*P``; unrefilled at t is ``max(0, h - t*A) / P``);
- a quota's stays Δ until its period ends;
- two raises add up (the first's unrefilled part plus the second's Δ); a lowered ceiling takes
  it back first (what is left is never more than `capacity - balance`); a top-up or reset (the
  item's re-arm count) and a split (its shard count) end it.

Only a restamp writes it (`carry`), so the acquire path's warm writes are unchanged.
"""

from __future__ import annotations

import math
from fractions import Fraction

from .bucket import (
    Headroom,
    Kind,
    Params,
    Slot,
    State,
    entry_spans,
    next_entry_change,
    same_scheduled_limit,
    view,
)
from .evolve import evolve

_QUOTAS = (Kind.CALENDAR, Kind.SESSION)


def _live(headroom: Headroom | None, slot: Slot, rearms: int) -> Headroom | None:
    if headroom is None or headroom.rearms != rearms or headroom.shards != slot.count:
        return None
    return headroom


def unrefilled(params: Params, state: State, now: int, slot: Slot, rearms: int) -> Fraction:
    """The headroom of `state` not refilled at `now` (milli, unrounded); `rearms`: the item's
    re-arm count."""
    live = _live(state.headroom, slot, rearms)
    if live is None:
        return Fraction(0)
    if params.kind == Kind.RATE:
        left = live.amount - now * params.shard_refill(slot)
        return Fraction(max(0, left), params.period_ms)
    if params.kind in _QUOTAS:
        current = view(params, state, now, slot)
        if not current.fresh_period and current.period == live.period == state.w:
            return Fraction(live.amount)
    return Fraction(0)


def use(params: Params, state: State, now: int, slot: Slot, rearms: int) -> int:
    """What the limit has consumed on this shard at `now` (milli): `capacity - balance`, less
    the headroom not refilled yet (never below 0 then)."""
    used = params.shard_capacity(slot) - view(params, state, now, slot).balance
    live = _live(state.headroom, slot, rearms)
    if live is None:
        return used
    if params.kind == Kind.RATE:
        t_a = now * params.shard_refill(slot)
        left = max(0, live.amount - t_a)
        if left == 0:
            return used
        return max(0, -(-(max(0, state.v - t_a) - left) // params.period_ms))
    head = unrefilled(params, state, now, slot, rearms)
    return used if head == 0 else max(0, used - int(head))


def carry(
    old: Params,
    new: Params,
    state: State,
    converted: State,
    now: int,
    slot: Slot,
    *,
    since: int | None,
    rearms: int,
) -> State:
    """`converted` (`bucket.convert` of `state` from `old` to `new` at `now`) with the headroom
    left unrefilled: the old one's rest plus a raise's Δ (`since`: the item's last write;
    `rearms`: its re-arm count)."""
    same_kind = old.kind == new.kind == Kind.RATE or (old.kind in _QUOTAS and new.kind in _QUOTAS)
    if not same_kind or (new.kind in _QUOTAS and converted.w is None):
        return _with(converted, None)
    if new.kind == Kind.RATE:
        head, before = _rate_before(old, new, state, now, slot, since, rearms)
    else:
        head, before = unrefilled(old, state, now, slot, rearms), old.shard_capacity(slot)
    cap = new.shard_capacity(slot)
    head = max(Fraction(0), head + cap - before)
    if cap < before:  # a lowered ceiling takes back its headroom first
        head = min(head, Fraction(max(0, cap - view(new, converted, now, slot).balance)))
    if head <= 0:
        return _with(converted, None)
    if new.kind == Kind.RATE:
        clock = now * new.shard_refill(slot) + math.ceil(head * new.period_ms)
        return _with(converted, Headroom(clock, rearms, slot.count))
    return _with(converted, Headroom(math.ceil(head), rearms, slot.count, converted.w))


def _rate_before(
    old: Params, new: Params, state: State, now: int, slot: Slot, since: int | None, rearms: int
) -> tuple[Fraction, int]:
    """(headroom unrefilled at `now`, the ceiling just before `now`) of a dripping limit under
    `old`; for the same limit in another schedule entry, walked through the entries since the
    item's last write as `convert` walks the balance (each entry's start adding its step up,
    its refill paying the headroom)."""
    ended = None
    if since and same_scheduled_limit(old, new):
        ended = next_entry_change(old, since, now)
    if ended is None or ended >= now:
        return unrefilled(old, state, now, slot, rearms), old.shard_capacity(slot)
    head = unrefilled(old, state, ended, slot, rearms)
    before = old.shard_capacity(slot)
    for in_force, start, end in entry_spans(old, ended, now):
        cap = in_force.shard_capacity(slot)
        head = max(Fraction(0), head + cap - before)
        head = max(Fraction(0), head - Fraction((end - start) * in_force.shard_refill(slot),
                                                 in_force.period_ms))  # fmt: skip
        before = cap
    return head, before


def _with(state: State, headroom: Headroom | None) -> State:
    return state if state.headroom == headroom else evolve(state, headroom=headroom)
