"""Write plans of the operator's balance operations: `top_up` and `reset_bucket`
(docs/reset-and-top-up.md). Pure.

Each plan is one `LimitWrite` on one shard, guarded so that it commutes with concurrent hot-path
writes (debits and credits planned by `bucket.plan_debit` / `bucket.plan_credit`):

* Dripping limit (debt clock `v`): a top-up or a reset gives back `step` scaled units of debt,
  ``v := v - step`` guarded by ``v >= t*A + step``. A debit landing in between only adds debt, so
  the guard still holds and the gain is exactly what the plan says; a credit that frees the
  room first makes the guard fail and the operation is planned again.
* Quota in a live period: ``v := v + n`` (and ``tu := tu + n`` for a top-up) guarded by the
  period start `w` and the top-ups `tu`; debits never change either, so they commute.
* Quota with no live period: a top-up opens the period (exactly as a debit would, see
  `bucket.plan_debit`) at the full allowance plus the top-up; a session reset ends the live
  session, so the next admitted request opens a fresh one.

Every function returns the write (None when nothing changes) and the gain in milli-units.
"""

from __future__ import annotations

from dataclasses import replace

from .bucket import Guard, Kind, LimitWrite, Params, State, plan_debit, view
from .shares import Slot, share


def spread(amount: int, slots: list[Slot]) -> list[int]:
    """A quota top-up spread over shards in whole units, by each shard's share (core.shares):
    the shares of every shard of the bucket sum to `amount` exactly."""
    return [share(amount, slot) for slot in slots]


def room(params: Params, state: State, now: int, slot: Slot) -> int:
    """Milli-units a dripping limit can gain before it reaches its ceiling (0 for quotas)."""
    if params.kind != Kind.RATE:
        return 0
    current = view(params, state, now, slot)
    return max(0, current.ceiling - current.balance)


def _give_back(
    params: Params, state: State, now: int, slot: Slot, most: int | None
) -> tuple[LimitWrite | None, int]:
    """Dripping: pay back debt, at most `most` milli-units (None: all of it, to the ceiling)."""
    t_a = now * params.shard_refill(slot)
    debt = max(0, state.v - t_a)
    step = debt if most is None else min(most * params.period_ms, debt)
    if step == 0:
        return None, 0
    gained = (
        most
        if most is not None and step == most * params.period_ms
        else room(params, state, now, slot)
    )
    write = LimitWrite(
        (Guard("v", ">=", t_a + step),), add_v=-step, result=replace(state, v=state.v - step)
    )
    return write, gained


def plan_top_up(
    params: Params, state: State, now: int, slot: Slot, amount: int
) -> tuple[LimitWrite | None, int]:
    """Add `amount` milli-units to one shard.

    Dripping: gains at most the room below the ceiling. Quota: exactly `amount` above the plan
    until the period ends (calendar edge, or the live session's end; a session opens if none is
    live).
    """
    if params.kind == Kind.RATE:
        return _give_back(params, state, now, slot, amount)
    current = view(params, state, now, slot)
    if not current.fresh_period:
        assert current.period is not None
        guards = (Guard("w", "=", current.period), Guard("tu", "=", state.tu))
        tu = state.tu + amount
        result = replace(state, v=state.v + amount, tu=tu)
        return LimitWrite(guards, add_v=amount, set_tu=tu, result=result), amount
    opened = plan_debit(params, state, now, slot, 0, enforce=False)
    assert opened is not None and opened.set_v is not None
    v = opened.set_v + amount
    result = replace(opened.result, v=v, tu=amount)
    return replace(opened, set_v=v, set_tu=amount, result=result), amount


def plan_reset(params: Params, state: State, now: int, slot: Slot) -> tuple[LimitWrite | None, int]:
    """Restore one shard's full allowance now.

    Dripping: to the ceiling (debt forgiven). Calendar quota: the full allowance plus this
    period's top-ups; the next edge is unchanged. Session quota: the live session ends (its
    top-ups with it); the next admitted request opens a fresh one at the full allowance.
    A limit already at its full allowance (or whose period has ended) needs no write.
    """
    if params.kind == Kind.RATE:
        return _give_back(params, state, now, slot, None)
    current = view(params, state, now, slot)
    if current.fresh_period:
        return None, 0
    assert current.period is not None
    guards = (Guard("w", "=", current.period), Guard("tu", "=", state.tu))
    if params.kind == Kind.CALENDAR:
        gain = current.ceiling - current.balance
        if gain == 0:
            return None, 0
        result = replace(state, v=state.v + gain)
        return LimitWrite(guards, add_v=gain, result=result), gain
    cap = params.shard_capacity(slot)
    ended = now - params.reset_after_ms
    result = replace(state, v=cap, w=ended, tu=0)
    write = LimitWrite(guards, set_v=cap, set_w=ended, set_tu=0, result=result)
    return write, max(0, cap - current.balance)


def allocate(rooms: list[int], amount: int) -> list[int]:
    """Spread `amount` over shards with these rooms: equal shares first, the rest where there is
    room left, so the total is min(amount, sum(rooms))."""
    given = [min(share, r) for share, r in zip(_equal(amount, len(rooms)), rooms, strict=True)]
    left = amount - sum(given)
    for i, r in enumerate(rooms):
        if left <= 0:
            break
        more = min(left, r - given[i])
        given[i] += more
        left -= more
    return given


def _equal(amount: int, parts: int) -> list[int]:
    base, extra = divmod(amount, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
