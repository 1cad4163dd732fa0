"""Splitting a bucket shard in two (write sharding, docs/sharding.md). Pure.

A shard `s` of a bucket with `n` shards becomes shards `s` and `s + n` of a bucket with `2n`.
Each limit's balance is divided between them, so the entity-wide total neither grows nor shrinks
(quotas stay exact; a rounding of at most one milli-unit per shard is lost, never minted). The
old shard's change is relative to its stored value, so writes that land between reading it and
splitting it are kept.
"""

from __future__ import annotations

from dataclasses import replace

from .bucket import Guard, Kind, LimitWrite, Params, State, view


def split_limit(params: Params, state: State, now: int, shards: int) -> tuple[LimitWrite, State]:
    """(change to the old shard, state of its new sibling) when `shards` doubles."""
    doubled = shards * 2
    current = view(params, state, now, shards)
    if params.kind == Kind.RATE:
        return _split_rate(params, state, now, shards, doubled, current.balance)
    if current.fresh_period:
        # the stored period is over: both halves start the next period at the new share
        return LimitWrite(), replace(state, consumed=0, overdrawn=0, tu=0)
    half = max(0, current.balance) // 2
    tu_half = state.tu // 2
    assert current.period is not None
    guards = (Guard("w", "=", current.period),)
    old = LimitWrite(
        guards,
        add_v=-half,
        add_tu=-tu_half,
        result=replace(state, v=state.v - half, tu=state.tu - tu_half),
    )
    sibling = State(v=half, w=state.w, tu=tu_half)
    return old, sibling


def _split_rate(
    params: Params, state: State, now: int, shards: int, doubled: int, balance: int
) -> tuple[LimitWrite, State]:
    old_refill = params.shard_refill(shards)
    new_refill = params.shard_refill(doubled)
    new_cap = params.shard_capacity(doubled)
    period = params.period_ms
    half = max(0, balance) // 2
    keep = min(balance - half, new_cap)
    target_v = now * new_refill + (new_cap - keep) * period
    sibling = State(v=now * new_refill + (new_cap - min(half, new_cap)) * period)
    t_old = now * old_refill
    if state.v >= t_old:
        write = LimitWrite((Guard("v", ">=", t_old),), add_v=target_v - state.v)
    else:
        write = LimitWrite((Guard("v", "<", t_old),), set_v=target_v)
    return replace(write, result=replace(state, v=target_v)), sibling
