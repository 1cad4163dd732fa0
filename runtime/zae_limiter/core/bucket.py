"""Bucket arithmetic: balances, refill, quota edges, and the plan of one conditional write.

Pure: no I/O, integers only. Amounts are milli-units, times epoch milliseconds.

A dripping limit is stored as a *debt clock* `v`: the balance at time `t` is
``C - max(0, v - t*A) / P`` (capacity C, refill A per period P). A debit of `c` is
``v := max(v, t*A) + c*P``. While the bucket is not full (``v >= t*A``) that is a plain addition,
so concurrent writers commute: each sends ``v = v + c*P`` guarded by ``v <= t*A + (C - c)*P`` and
no update can be lost. Refill is exact (no rounding is ever stored), a clock running ahead can at
most pull refill forward by its skew (``v`` only moves forward in time), and refill is never
negative.

A quota is stored as its remaining balance `v`, the start `w` of its current period (calendar
edge or session start) and the top-ups `tu` bought this period.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction

from . import cron, schedule
from .cron import Cron
from .evolve import evolve
from .holds import Hold, HoldWrite
from .shares import MILLI, WHOLE, Slot, refill_share, share

__all__ = ["MILLI", "WHOLE", "Slot"]
#: A wait walks across at most this many schedule entries (then the last rate is assumed).
MAX_ENTRIES_WALKED = 1000
#: How far ahead a request above an entry's ceiling looks for an entry that can hold it.
MAX_WAIT_SCANNED_MS = 7 * 24 * 3_600_000
#: The wait reported for a request that can never fit (no edge, no refill on this shard).
NEVER_MS = 10**12


class Kind(IntEnum):
    RATE = 0
    CALENDAR = 1
    SESSION = 2
    CONCURRENT = 3  # capacity: max in flight; period: lease_ttl (core.holds)


@dataclass(frozen=True)
class Params:
    """A limit as stamped on a bucket item: undivided, in milli-units and milliseconds."""

    name: str
    kind: Kind
    capacity: int
    refill: int
    period_ms: int
    soft: bool = False
    cron: str = ""  # calendar: reset edges "expr|tz", several joined by ";"
    reset_after_ms: int = 0  # session
    schedule: str = ""  # schedule entries (core.schedule); capacity/refill/period are in force
    entry: int = -1  # the schedule entry the parameters above come from (-1: base)
    base: tuple[int, int, int] | None = None  # capacity, refill, period without an entry
    alerts: tuple[int, ...] = ()  # alert thresholds, percent of capacity (read by the aggregator)

    def scheduled(self, now: int) -> Params:
        """These parameters as they apply at `now` (another schedule entry, or the same)."""
        if not self.schedule:
            return self
        entry = schedule.active(self.schedule, now)
        if entry == self.entry:
            return self
        base = self.base or (self.capacity, self.refill, self.period_ms)
        capacity, refill, period = schedule.effective(
            base, self.schedule, entry, quota=self.kind != Kind.RATE
        )
        return evolve(self, capacity=capacity, refill=refill, period_ms=period, entry=entry)

    def shard_capacity(self, slot: Slot) -> int:
        """The capacity (a quota: the allowance) one shard holds (core.shares)."""
        return share(self.capacity, slot)

    def shard_refill(self, slot: Slot) -> int:
        """The refill one shard earns per period (0 for quotas; core.shares)."""
        if self.kind != Kind.RATE:
            return 0
        return refill_share(self.capacity, self.refill, slot)

    def reset_edges(self) -> list[Cron]:
        """A calendar quota's reset schedules: it resets at every edge of each."""
        return [cron.parse(*edge.split("|", 1)) for edge in self.cron.split(";")]

    def period_start(self, now: int, state_w: int | None) -> int | None:
        """Start of the period in force at `now`: calendar edge, or the live session's start."""
        if self.kind == Kind.CALENDAR:
            lasts = [e for e in (c.last_edge_ms(now) for c in self.reset_edges()) if e is not None]
            return max(lasts, default=0)
        if self.kind == Kind.SESSION:
            if state_w is not None and now < state_w + self.reset_after_ms:
                return state_w
            return None
        return None

    def next_reset_ms(self, now: int, state_w: int | None) -> int | None:
        if self.kind == Kind.CALENDAR:
            nexts = [e for e in (c.next_edge_ms(now) for c in self.reset_edges()) if e is not None]
            return min(nexts, default=None)
        if (
            self.kind == Kind.SESSION
            and state_w is not None
            and now < state_w + self.reset_after_ms
        ):
            return state_w + self.reset_after_ms
        return None


@dataclass(frozen=True)
class Headroom:
    """What a raised ceiling added that refill has not paid yet: not use (core.headroom)."""

    amount: int  # dripping: a clock like `v` (t*A + unrefilled*P); quota: unrefilled milli
    rearms: int  # the item's re-arm count when measured (a top-up or reset ends it)
    shards: int  # the shard count it was measured on (a split ends it)
    period: int | None = None  # quota: the period it belongs to


@dataclass(frozen=True)
class State:
    """Stored state of one limit on one shard."""

    v: int = 0
    w: int | None = None
    tu: int = 0
    consumed: int = 0  # net consumption counter (milli), for usage snapshots
    overdrawn: int = 0  # writes that left a soft limit below zero
    holds: tuple[Hold, ...] = ()  # a concurrency limit's entries; `v` is their sum
    headroom: Headroom | None = None  # a raise not refilled yet (alerts only; core.headroom)


@dataclass(frozen=True)
class View:
    """A limit brought to `now`: balance, ceiling, and the period it belongs to."""

    balance: int  # milli, may be negative
    ceiling: int  # milli
    period: int | None  # quota period start in force (None: none open / dripping)
    fresh_period: bool  # a quota whose stored period has ended (balance shown is the new one)


def full_state(params: Params, slot: Slot) -> State:
    """The state of a never-used (or expired) bucket: full allowance, no period open."""
    if params.kind in (Kind.RATE, Kind.CONCURRENT):
        return State(v=0)  # nothing owed / nothing held
    return State(v=params.shard_capacity(slot), w=None)


def refill_ms(capacity: int, refill: int, period_ms: int) -> int:
    """How long a dripping limit takes to refill `capacity` from empty: ``C * P / A`` (ms,
    rounded down; a refill below 1 counts as 1)."""
    return capacity * period_ms // max(1, refill)


def refill_seconds(capacity: int, refill: int, period_ms: int) -> int | None:
    """`refill_ms` in whole seconds, rounded up and at least 1 (a RateLimit policy's window);
    None for a limit that never refills."""
    if refill <= 0:
        return None
    return max(1, -(-capacity * period_ms // (refill * 1000)))


def refill_period_start(params: Params, now: int) -> int:
    """The start of the refill period (epoch-aligned) that `now` falls in: a rate limit's
    period, as an alert names it."""
    return now - now % max(1, params.period_ms)


def exact_balance(params: Params, state: State, now: int, slot: Slot) -> Fraction:
    """A limit's balance on one shard at `now`, in milli-units, unrounded (the view floors it):
    what entity-wide reports sum before rounding once."""
    if params.kind != Kind.RATE:
        return Fraction(view(params, state, now, slot).balance)
    debt = Fraction(max(0, state.v - now * params.shard_refill(slot)), params.period_ms)
    return params.shard_capacity(slot) - debt


def view(params: Params, state: State, now: int, slot: Slot) -> View:
    cap = params.shard_capacity(slot)
    if params.kind == Kind.RATE:
        refill = params.shard_refill(slot)
        debt_scaled = max(0, state.v - now * refill)
        # floor of a rational balance: C - ceil(debt_scaled / P)
        balance = cap - (-(-debt_scaled // params.period_ms))
        return View(balance, cap, None, False)
    if params.kind == Kind.CONCURRENT:  # every entry counts until a write removes it
        return View(cap - state.v, cap, None, False)
    period = params.period_start(now, state.w)
    if period is not None and state.w == period:
        return View(state.v, cap + state.tu, period, False)
    return View(cap, cap, period, True)


def next_entry_change(params: Params, at: int, until: Fraction | int) -> int | None:
    """When the entry in force at `at` next changes, if before `until` (to the minute)."""
    minute = at // schedule.MINUTE_MS
    minutes = math.ceil(Fraction(until) / schedule.MINUTE_MS) - minute
    return schedule.next_change(params.schedule, params.entry, minute, max(1, minutes))


def entry_spans(params: Params, at: int, until: int) -> Iterator[tuple[Params, int, int]]:
    """(parameters in force, from, to) of each schedule entry from `at` to `until`."""
    in_force = params
    for _ in range(MAX_ENTRIES_WALKED):
        in_force = in_force.scheduled(at)
        change = next_entry_change(in_force, at, until)  # None: the entry lasts to `until`...
        end = min(until, at + MAX_WAIT_SCANNED_MS if change is None else change)  # ...or a week
        yield in_force, at, end
        if end >= until:
            return
        at = end


def _balance_through_entries(
    params: Params, balance: Fraction, at: int, until: int, slot: Slot
) -> Fraction:
    """From `balance` at `at` to `until`: each entry's rate while it is in force, each
    entry's start cutting to its ceiling."""
    for in_force, start, end in entry_spans(params, at, until):
        cap = Fraction(in_force.shard_capacity(slot))
        rate = Fraction(in_force.shard_refill(slot), in_force.period_ms)
        balance = min(min(balance, cap) + (end - start) * rate, cap)
    return balance


# --- write plans -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Guard:
    """One condition on a limit's stored attribute: `attr op value` (or absent-or-`op`)."""

    attr: str  # "v", "w" or "tu"
    op: str  # one of = <> < <= > >=
    value: int
    or_absent: bool = False


@dataclass(frozen=True)
class LimitWrite:
    """How one limit changes in one write: guards, then add to / set `v`, `w`, `tu`."""

    guards: tuple[Guard, ...] = ()
    add_v: int = 0
    set_v: int | None = None
    set_w: int | None = None
    set_tu: int | None = None
    add_tu: int = 0
    consumed: int = 0
    overdrawn: int = 0
    result: State = field(default_factory=State)  # projected state if the write lands
    holds: HoldWrite | None = None  # a concurrency limit's entries (core.hold_writes)

    @property
    def touches_balance(self) -> bool:
        return (
            self.add_v != 0 or self.set_v is not None or self.set_w is not None or bool(self.holds)
        )


def refuses(params: Params, state: State, now: int, slot: Slot, amount: int) -> bool:
    """Whether an enforced debit of `amount`, judged on this state as just read, is refused:
    exactly when `plan_debit(..., enforce=True, check=True)` returns None, without planning
    the write (the rejection cache asks this on every warm call)."""
    if view(params, state, now, slot).balance < amount:
        return True
    cap = params.shard_capacity(slot)
    return amount > (cap + state.tu if params.kind != Kind.RATE else cap)


def plan_debit(
    params: Params,
    state: State,
    now: int,
    slot: Slot,
    amount: int,
    *,
    enforce: bool,
    check: bool = True,
) -> LimitWrite | None:
    """Debit `amount`; guarded so it lands only if the limit can admit it (when `enforce`).

    Returns None when `check` is set and the image shows it cannot be admitted (a stale image
    is not trusted to refuse: the guards decide on the server).
    """
    cap = params.shard_capacity(slot)
    current = view(params, state, now, slot)
    if enforce and check and current.balance < amount:
        return None
    if enforce and amount > (cap + state.tu if params.kind != Kind.RATE else cap):
        return None  # can never fit
    if params.kind == Kind.RATE:
        refill = params.shard_refill(slot)
        t_a = now * refill
        step = amount * params.period_ms
        if state.v >= t_a:
            guards = [Guard("v", ">=", t_a)]
            if enforce:
                guards.append(Guard("v", "<=", t_a + (cap - amount) * params.period_ms))
            new_v = state.v + step
            write = LimitWrite(tuple(guards), add_v=step)
        else:
            new_v = t_a + step
            write = LimitWrite((Guard("v", "<", t_a),), set_v=new_v)
        result = evolve(state, v=new_v, consumed=state.consumed + amount)
        return _with_overdraw(params, write, result, now, slot, amount)
    if not current.fresh_period:
        assert current.period is not None
        guards = [Guard("w", "=", current.period)]
        if enforce:
            guards.append(Guard("v", ">=", amount))
        result = evolve(state, v=state.v - amount, consumed=state.consumed + amount)
        write = LimitWrite(tuple(guards), add_v=-amount)
        return _with_overdraw(params, write, result, now, slot, amount)
    # a new period opens with this write
    period = (current.period or 0) if params.kind == Kind.CALENDAR else now
    guard = period_not_opened(params, current, now)
    result = State(cap - amount, period, 0, state.consumed + amount, state.overdrawn)
    write = LimitWrite((guard,), set_v=cap - amount, set_w=period, set_tu=0)
    return _with_overdraw(params, write, result, now, slot, amount)


def period_not_opened(params: Params, current: View, now: int) -> Guard:
    """A quota whose stored period has ended (`current.fresh_period`) has not had the period in
    force at `now` opened since: the guard of a write that opens it (or splits around it)."""
    if params.kind == Kind.CALENDAR:
        return Guard("w", "<", current.period or 0, or_absent=True)
    return Guard("w", "<=", now - params.reset_after_ms, or_absent=True)


def _with_overdraw(
    params: Params, write: LimitWrite, result: State, now: int, slot: Slot, amount: int
) -> LimitWrite:
    overdrawn = 0
    if params.soft and view(params, result, now, slot).balance < 0:
        overdrawn = 1
    result = evolve(result, overdrawn=result.overdrawn + overdrawn)
    return evolve(write, consumed=amount, overdrawn=overdrawn, result=result)


def plan_credit(
    params: Params, state: State, now: int, slot: Slot, amount: int, period: int | None
) -> LimitWrite:
    """Give back `amount` debited in `period` (quota) without exceeding the ceiling.

    A quota credit for a period that has since reset is dropped (only the consumption counter
    goes down), so it never adds to the new period.
    """
    cap = params.shard_capacity(slot)
    counted = evolve(state, consumed=state.consumed - amount)
    if params.kind == Kind.RATE:
        refill = params.shard_refill(slot)
        t_a = now * refill
        step = amount * params.period_ms
        if state.v >= t_a + step:
            return LimitWrite(
                (Guard("v", ">=", t_a + step),),
                add_v=-step,
                consumed=-amount,
                result=evolve(counted, v=state.v - step),
            )
        return LimitWrite(
            (Guard("v", "<", t_a + step),),
            set_v=t_a,
            consumed=-amount,
            result=evolve(counted, v=t_a),
        )
    current = view(params, state, now, slot)
    if current.fresh_period or period is None or current.period != period:
        return LimitWrite(consumed=-amount, result=counted)
    top = cap + state.tu
    base = (Guard("w", "=", period), Guard("tu", "=", state.tu))
    if state.v + amount <= top:
        return LimitWrite(
            (*base, Guard("v", "<=", top - amount)),
            add_v=amount,
            consumed=-amount,
            result=evolve(counted, v=state.v + amount),
        )
    return LimitWrite(
        (*base, Guard("v", ">", top - amount)),
        set_v=top,
        consumed=-amount,
        result=evolve(counted, v=top),
    )


def plan_count_only(state: State, amount: int) -> LimitWrite:
    """Bypass: count consumption, leave the balance alone."""
    return LimitWrite(consumed=amount, result=evolve(state, consumed=state.consumed + amount))


def convert(
    old: Params,
    new: Params,
    state: State,
    now: int,
    slot: Slot,
    since: int | None = None,
    changed_at: int = 0,
) -> State:
    """Restamp a limit with new parameters, keeping its balance (cut to a lower ceiling).

    Dripping: the balance is kept and refills toward the new ceiling at the new rate. Quota: the
    period's remaining balance is kept, cut to the new ceiling plus this period's top-ups, with
    its top-ups and live session, whatever its schedule became (a limit is identified by its
    name, docs/configuration.md); the old period is judged at the config change (`changed_at`,
    else now), and the new schedule's edges after it apply on the next touch.
    For the same limit with a schedule, `since` (the item's last write, when the old entry was
    in force) lets the balance follow each entry's rate from the first entry change on.
    """
    if Kind.CONCURRENT in (old.kind, new.kind):  # holds stay held; no balance carries over
        return state if old.kind == new.kind else full_state(new, slot)
    if since and same_scheduled_limit(old, new):
        ended = next_entry_change(old, since, now)
        if ended is not None and ended < now:
            debt = Fraction(max(0, state.v - ended * old.shard_refill(slot)), old.period_ms)
            walked = _balance_through_entries(
                old, old.shard_capacity(slot) - debt, ended, now, slot
            )
            ceiling = new.shard_capacity(slot)
            owed = math.ceil((ceiling - min(walked, Fraction(ceiling))) * new.period_ms)
            return evolve(state, v=now * new.shard_refill(slot) + owed, w=None, tu=0)
    current = view(old, state, now, slot)
    cap = new.shard_capacity(slot)
    if new.kind == Kind.RATE:
        balance = min(current.balance, cap) if old.kind == Kind.RATE else cap
        refill = new.shard_refill(slot)
        # balance b at now  <=>  v = now*A + (C - b)*P   (v = now*A when full)
        v = now * refill + max(0, cap - balance) * new.period_ms
        v = max(v, now * refill)
        return evolve(state, v=v, w=None, tu=0)
    if old.kind == Kind.RATE:
        return evolve(state, v=cap, w=None, tu=0)  # a quota where there was none: full
    # when the old rules stopped being in force: the change, or a later write under them
    changed = min(now, max(changed_at, since or 0)) if changed_at else now
    current = view(old, state, changed, slot)
    if current.fresh_period:
        return evolve(state, v=cap, w=None, tu=0)  # the period had ended before the change
    # The same quota (identified by its name) with other parameters or another schedule: this
    # period's balance, top-ups and live session are kept; the new schedule only decides the
    # next edge (its edges between the period's start and the change are not replayed).
    return evolve(
        state,
        v=min(current.balance, cap + state.tu),
        w=_kept_period_start(old, new, state, current, changed),
    )


def _kept_period_start(
    old: Params, new: Params, state: State, current: View, changed: int
) -> int | None:
    """The period start to store when a live quota period carries over to new parameters."""
    if new.kind == Kind.CALENDAR:
        if old.kind == Kind.CALENDAR and cron.same_schedule(old.cron, new.cron):
            return state.w
        return new.period_start(changed, None)  # the new schedule's period at the change
    if old.kind == Kind.SESSION:
        return state.w  # the live session's start, whatever its new length
    return current.period  # a calendar period becomes a session opened at its start


def in_force(
    params: Params, state: State, now: int, slot: Slot, *, since: int | None
) -> tuple[Params, State]:
    """A stored limit brought to `now`: the schedule entry in force and its balance converted
    as the next write's restamp will (`since`: the item's last write)."""
    moved = params.scheduled(now)
    if moved is params and not entry_passed(params, since, now):
        return params, state
    return moved, convert(params, moved, state, now, slot, since=since)


def entry_passed(params: Params, since: int | None, now: int) -> bool:
    """Whether a dripping limit's schedule left its stamped entry after `since` (the item's
    last write), even if that entry is in force again at `now`: its balance must be walked."""
    if params.kind != Kind.RATE or not params.schedule or not since:
        return False
    if since // schedule.MINUTE_MS >= now // schedule.MINUTE_MS:
        return False  # entries change on minute starts: none between two times in one minute
    change = next_entry_change(params, since, now)
    return change is not None and change <= now


def same_scheduled_limit(old: Params, new: Params) -> bool:
    """The same dripping limit with a schedule (in the same or another entry)."""
    return (
        old.kind == new.kind == Kind.RATE
        and bool(old.schedule)
        and old.schedule == new.schedule
        and (old.base or (old.capacity, old.refill, old.period_ms))
        == (new.base or (new.capacity, new.refill, new.period_ms))
    )
