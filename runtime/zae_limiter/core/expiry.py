"""How long a bucket item's stored state matters: the span its expiry is measured in. Pure.

`acquire.planning.ttl_for` sets an unsplit item's TTL to a multiple (`bucket_ttl_multiplier`,
docs/on-unavailable.md) of the longest span of its limits: past it the item says nothing a blank
one would not.
"""

from __future__ import annotations

from .bucket import WHOLE, Kind, Params, State, refill_ms


def expiry_span_ms(params: Params, state: State, now: int) -> int:
    """How long after `now` an unsplit item's `state` still says more than a blank one: a rate
    limit's debt repaid and then a refill from empty, a quota's next edge (a session: its end,
    else its length), a concurrency limit's lease_ttl (renewals write three times as often)."""
    if params.kind == Kind.CONCURRENT:
        return params.period_ms
    if params.kind == Kind.RATE:
        refill = max(1, params.shard_refill(WHOLE))
        debt_ms = max(0, state.v - now * refill) // refill
        return refill_ms(params.shard_capacity(WHOLE), refill, params.period_ms) + debt_ms
    nxt = params.next_reset_ms(now, state.w)
    span = (nxt - now) if nxt is not None else params.reset_after_ms
    if params.kind == Kind.SESSION and state.w is not None:
        span = max(span, state.w + params.reset_after_ms - now)
    return span
