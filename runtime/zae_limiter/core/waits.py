"""How long until a request fits on one limit (the wait a rejection reports).

Pure: no I/O. A dripping limit waits for its refill, across schedule entries when it has them;
a quota waits for its next edge (calendar) or the end of its session.
"""

from __future__ import annotations

import math
from fractions import Fraction

from . import bucket, holds
from .bucket import Params, State
from .shares import Slot


def retry_after_ms(
    params: Params,
    state: State,
    now: int,
    slot: Slot,
    requested: int,
    outlook: holds.Outlook | None = None,
) -> int:
    """Smallest wait after which `requested` fits on this limit, ignoring the ceiling.

    A dripping limit with a schedule walks forward across its entries: each entry's rate
    applies while it is in force, and a entry's start cuts the balance to its ceiling. A
    concurrency limit waits until enough is given back, as far as the refusing writer can tell
    (`outlook`, core.holds.frees_at; without one, entries come back past their expiry).
    """
    current = bucket.view(params, state, now, slot)
    if current.balance >= requested:
        return 0
    if params.kind == bucket.Kind.CONCURRENT:
        cap = params.shard_capacity(slot)
        return holds.retry_after_ms(cap, state.v, state.holds, now, requested, outlook=outlook)
    if params.kind == bucket.Kind.RATE:
        if params.schedule:
            return _walk_entries(params, state, now, slot, requested)
        return _rate_wait(params, state, now, slot, requested)
    if params.kind == bucket.Kind.CALENDAR:
        edge = params.next_reset_ms(now, state.w)
        return (edge - now + 1) if edge is not None else bucket.NEVER_MS
    # session
    if current.fresh_period:
        return 0 if params.shard_capacity(slot) >= requested else params.reset_after_ms
    assert state.w is not None
    return max(1, state.w + params.reset_after_ms - now)


def next_unit_ms(
    params: Params, state: State, now: int, slot: Slot, owed: int = 0, balance: int | None = None
) -> int | None:
    """How long the whole units a dripping limit has now are all that can be used (the
    RateLimit `t` of draft -11): until one more whole unit has dripped in (from a full bucket,
    one unit's drip once it is used; from debt, until the balance reaches 1). `owed`: whole
    units already taken but not yet written (a lease's deferred adjustments); `balance`: the
    view's balance at `now` when the caller has it. None for quotas and concurrency limits."""
    if params.kind != bucket.Kind.RATE:
        return None
    if balance is None:
        balance = bucket.view(params, state, now, slot).balance
    requested = (max(0, balance // bucket.MILLI - owed) + 1 + owed) * bucket.MILLI
    if params.schedule:
        return _walk_entries(params, state, now, slot, requested)
    return _rate_wait(params, state, now, slot, requested)


def _rate_wait(params: Params, state: State, now: int, slot: Slot, requested: int) -> int:
    """The wait at the rate in force now, for as long as it takes."""
    refill = params.shard_refill(slot)
    cap = params.shard_capacity(slot)
    if refill == 0:
        return bucket.NEVER_MS  # a shard that holds none of this limit
    # balance at t: cap - (max(v, t*A) - t*A)/P >= requested  <=>  t*A >= v - (cap - req)*P.
    # The wait is the first whole millisecond strictly after that instant.
    base = max(state.v, now * refill)
    target = base - (cap - requested) * params.period_ms
    return max(1, target // refill + 1 - now)


def _walk_entries(params: Params, state: State, now: int, slot: Slot, requested: int) -> int:
    """The wait across schedule entries: each entry's rate while it is in force."""
    debt = Fraction(max(0, state.v - now * params.shard_refill(slot)), params.period_ms)
    balance = params.shard_capacity(slot) - debt  # milli-units at `now`, exact
    at, in_force, fits_at = now, params, Fraction(now)
    for _ in range(bucket.MAX_ENTRIES_WALKED):
        in_force = in_force.scheduled(at)
        cap = in_force.shard_capacity(slot)
        rate = Fraction(in_force.shard_refill(slot), in_force.period_ms)  # milli per ms
        balance = min(balance, Fraction(cap))  # a entry's start cuts to its ceiling
        if rate == 0:
            return bucket.NEVER_MS  # this shard holds none of the limit in this entry
        fits_at = at + (requested - balance) / rate  # ignoring the ceiling, as without entries
        # Above this entry's ceiling the request waits for the next entry, if one comes.
        horizon = fits_at if requested <= cap else at + bucket.MAX_WAIT_SCANNED_MS
        change = bucket.next_entry_change(in_force, at, horizon)
        if change is None or (requested <= cap and change >= fits_at):
            break
        balance = min(balance + (change - at) * rate, Fraction(cap))
        at = change
    return max(1, math.floor(fits_at) + 1 - now)
