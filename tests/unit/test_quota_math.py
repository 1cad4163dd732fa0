"""Property tests of the quota maths (core/bucket.py) and of top-up / reset plans
(core/operations.py).

`land()` applies a planned `LimitWrite` to a stored state exactly as DynamoDB applies the
UpdateItem built from it (guards, then relative adds or absolute sets), so the tests can replay
concurrent writers in any order: a write planned on one image and landing after another
writer's is what happens on the server.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from support.memory_bucket_io import COMPARE
from zae_limiter.core import bucket, operations
from zae_limiter.core.bucket import MILLI, WHOLE, Guard, Kind, LimitWrite, Params, Slot, State

MONDAY = 1_767_571_200_000  # 2026-01-05 00:00 UTC
WEEK = 7 * 86_400_000
HOUR = 3_600_000


def holds(guard: Guard, state: State) -> bool:
    value = getattr(state, guard.attr)
    if value is None:
        return guard.or_absent
    return COMPARE[guard.op](value, guard.value)


def land(write: LimitWrite | None, state: State) -> State | None:
    """The stored state after the write, or None when a guard refuses it."""
    if write is None:
        return state
    if not all(holds(g, state) for g in write.guards):
        return None
    return State(
        v=write.set_v if write.set_v is not None else state.v + write.add_v,
        w=write.set_w if write.set_w is not None else state.w,
        tu=write.set_tu if write.set_tu is not None else state.tu,
        consumed=state.consumed + write.consumed,
        overdrawn=state.overdrawn + write.overdrawn,
    )


def weekly(capacity: int, *, soft: bool = False) -> Params:
    return Params(
        "weekly", Kind.CALENDAR, capacity * MILLI, 0, 60_000, soft=soft, cron="0 0 * * 1|UTC"
    )


def session(capacity: int, hours: int = 5) -> Params:
    return Params("session", Kind.SESSION, capacity * MILLI, 0, 60_000, reset_after_ms=hours * HOUR)


def rate(capacity: int, refill: int, period_s: int) -> Params:
    return Params("rate", Kind.RATE, capacity * MILLI, refill * MILLI, period_s * 1000)


def debit(p: Params, s: State, now: int, amount: int, *, enforce: bool = True) -> State | None:
    write = bucket.plan_debit(p, s, now, WHOLE, amount, enforce=enforce)
    return None if write is None else land(write, s)


def balance(p: Params, s: State, now: int, slot: Slot = WHOLE) -> int:
    return bucket.view(p, s, now, slot).balance


offsets = st.integers(0, WEEK - 1)
amounts = st.integers(1, 1_000)


# --- calendar quotas -----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    capacity=amounts,
    spends=st.lists(st.tuples(offsets, st.integers(0, 1_500)), max_size=12),
    weeks=st.integers(1, 6),
    later=offsets,
)
def test_a_calendar_edge_sets_the_full_allowance_however_many_were_missed(
    capacity: int, spends: list[tuple[int, int]], weeks: int, later: int
) -> None:
    p = weekly(capacity, soft=True)
    s = State()
    for at, amount in sorted(spends):
        landed = debit(p, s, MONDAY + at, amount * MILLI, enforce=False)
        assert landed is not None
        s = landed
    now = MONDAY + weeks * WEEK + later
    current = bucket.view(p, s, now, WHOLE)
    assert (current.balance, current.ceiling) == (capacity * MILLI, capacity * MILLI)
    assert current.period == MONDAY + weeks * WEEK  # the last edge, applied once
    opened = debit(p, s, now, 1, enforce=True)
    assert opened is not None and opened.w == MONDAY + weeks * WEEK
    assert balance(p, opened, now) == capacity * MILLI - 1


@settings(max_examples=150, deadline=None)
@given(
    capacity=amounts,
    spent=st.integers(0, 1_000),
    top_ups=st.lists(amounts, min_size=1, max_size=5),
    at=offsets,
)
def test_a_calendar_top_up_adds_exactly_n_until_the_next_edge(
    capacity: int, spent: int, top_ups: list[int], at: int
) -> None:
    p = weekly(capacity)
    s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
    assert s is not None
    now = MONDAY + at
    before = balance(p, s, now)
    for n in top_ups:
        write, gained = operations.plan_top_up(p, s, now, WHOLE, n * MILLI)
        assert gained == n * MILLI
        landed = land(write, s)
        assert landed is not None
        s = landed
    total = sum(top_ups) * MILLI
    current = bucket.view(p, s, now, WHOLE)
    assert (current.balance, current.ceiling) == (before + total, capacity * MILLI + total)
    assert balance(p, s, MONDAY + WEEK) == capacity * MILLI  # gone at the next edge
    drained = debit(p, s, now, before + total)  # all of it is usable in this period
    assert drained is not None and balance(p, drained, now) == 0


@settings(max_examples=150, deadline=None)
@given(capacity=amounts, spent=st.integers(0, 1_000), first=amounts, n=amounts, at=offsets)
def test_a_quota_top_up_commutes_with_a_concurrent_debit(
    capacity: int, spent: int, first: int, n: int, at: int
) -> None:
    """Planned on one image; a debit lands first; the top-up's guards still hold."""
    for p in (weekly(capacity), session(capacity, hours=24 * 7)):
        s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
        assert s is not None
        now = MONDAY + at
        other = bucket.plan_debit(p, s, now, WHOLE, first * MILLI, enforce=True)
        assume(other is not None)
        top_up, _ = operations.plan_top_up(p, s, now, WHOLE, n * MILLI)
        debit_first = land(top_up, land(other, s) or s)
        top_up_first = land(other, land(top_up, s) or s)
        assert debit_first is not None and top_up_first is not None
        assert debit_first == top_up_first


@settings(max_examples=150, deadline=None)
@given(
    capacity=amounts,
    spent=st.integers(0, 3_000),
    bought=st.integers(0, 1_000),
    at=offsets,
)
def test_a_calendar_reset_restores_the_allowance_plus_this_periods_top_ups(
    capacity: int, spent: int, bought: int, at: int
) -> None:
    p = weekly(capacity, soft=True)
    s = State()
    if bought:
        write, _ = operations.plan_top_up(p, s, MONDAY, WHOLE, bought * MILLI)
        s = land(write, s) or s
    s = debit(p, s, MONDAY, spent * MILLI, enforce=False) or s
    now = MONDAY + at
    before = balance(p, s, now)
    write, gained = operations.plan_reset(p, s, now, WHOLE)
    after = land(write, s)
    assert after is not None
    ceiling = (capacity + bought) * MILLI
    assert balance(p, after, now) == ceiling == before + gained
    assert bucket.view(p, after, now, WHOLE).period == MONDAY  # the next edge is unchanged


# --- session quotas ------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    capacity=amounts,
    hours=st.integers(1, 48),
    start=st.integers(0, 10**9),
    spent=amounts,
    into=st.integers(0, 48 * HOUR),
)
def test_a_session_is_start_to_start_plus_reset_after(
    capacity: int, hours: int, start: int, spent: int, into: int
) -> None:
    p = session(capacity, hours)
    opened_at = MONDAY + start
    s = debit(p, State(), opened_at, min(spent, capacity) * MILLI)
    assert s is not None and s.w == opened_at  # opens at the first admitted use
    end = opened_at + hours * HOUR
    assert bucket.view(p, s, end - 1, WHOLE).period == opened_at
    assert p.next_reset_ms(end - 1, s.w) == end
    ended = bucket.view(p, s, end, WHOLE)
    assert ended.fresh_period and ended.balance == capacity * MILLI
    now = end + into
    reopened = debit(p, s, now, 1)
    assert reopened is not None and reopened.w == now  # idle-restarting, not a grid
    assert p.next_reset_ms(now, reopened.w) == now + hours * HOUR


@settings(max_examples=150, deadline=None)
@given(capacity=amounts, spent=amounts, bought=amounts, at=st.integers(0, 5 * HOUR - 1))
def test_a_session_reset_ends_the_session_and_its_top_ups(
    capacity: int, spent: int, bought: int, at: int
) -> None:
    p = session(capacity)
    s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
    assert s is not None
    write, _ = operations.plan_top_up(p, s, MONDAY + at, WHOLE, bought * MILLI)
    s = land(write, s) or s
    write, gained = operations.plan_reset(p, s, MONDAY + at, WHOLE)
    after = land(write, s)
    assert after is not None
    current = bucket.view(p, after, MONDAY + at, WHOLE)
    assert current.fresh_period and current.balance == capacity * MILLI
    assert gained == max(0, capacity * MILLI - (capacity - min(spent, capacity) + bought) * MILLI)
    fresh = debit(p, after, MONDAY + at, capacity * MILLI)
    assert fresh is not None and fresh.w == MONDAY + at  # the next request opens a new session


@given(capacity=amounts, n=amounts, at=st.integers(0, 10**9))
def test_a_session_top_up_with_no_live_session_opens_one(capacity: int, n: int, at: int) -> None:
    p = session(capacity)
    write, gained = operations.plan_top_up(p, State(), MONDAY + at, WHOLE, n * MILLI)
    s = land(write, State())
    assert s is not None and gained == n * MILLI
    assert (s.w, balance(p, s, MONDAY + at)) == (MONDAY + at, (capacity + n) * MILLI)


# --- credits and conversions on quotas -----------------------------------------------------------


@given(capacity=amounts, spent=amounts, back=amounts, at=offsets)
def test_a_credit_for_an_ended_period_is_dropped(
    capacity: int, spent: int, back: int, at: int
) -> None:
    p = weekly(capacity)
    s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
    assert s is not None
    late = MONDAY + WEEK + at
    credit = bucket.plan_credit(p, s, late, WHOLE, back * MILLI, MONDAY)
    after = land(credit, s)
    assert after is not None and balance(p, after, late) == capacity * MILLI
    same = bucket.plan_credit(p, s, MONDAY + at, WHOLE, back * MILLI, MONDAY)
    after = land(same, s)
    assert after is not None
    assert balance(p, after, MONDAY + at) == min(
        capacity * MILLI, balance(p, s, MONDAY) + back * MILLI
    )


@given(old=amounts, new=amounts, spent=amounts, bought=st.integers(0, 1_000))
def test_a_plan_change_keeps_this_periods_remaining_cut_to_the_new_ceiling_plus_top_ups(
    old: int, new: int, spent: int, bought: int
) -> None:
    before, after = weekly(old), weekly(new)
    s = debit(before, State(), MONDAY, min(spent, old) * MILLI)
    assert s is not None
    write, _ = (
        operations.plan_top_up(before, s, MONDAY, WHOLE, bought * MILLI) if bought else (None, 0)
    )
    s = land(write, s) or s
    remaining = balance(before, s, MONDAY)
    converted = bucket.convert(before, after, s, MONDAY + 1, WHOLE)
    assert balance(after, converted, MONDAY + 1) == min(remaining, (new + bought) * MILLI)
    assert balance(after, converted, MONDAY + WEEK) == new * MILLI


# --- dripping limits -----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    capacity=amounts,
    refill=amounts,
    period=st.integers(1, 86_400),
    spent=amounts,
    elapsed=st.integers(0, 10**7),
    n=st.integers(1, 2_000),
)
def test_a_dripping_top_up_gains_min_n_and_the_room_below_the_ceiling(
    capacity: int, refill: int, period: int, spent: int, elapsed: int, n: int
) -> None:
    p = rate(capacity, refill, period)
    s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
    assert s is not None
    now = MONDAY + elapsed
    before = balance(p, s, now)
    room = operations.room(p, s, now, WHOLE)
    write, gained = operations.plan_top_up(p, s, now, WHOLE, n * MILLI)
    assert gained == min(n * MILLI, room) == min(n * MILLI, capacity * MILLI - before)
    after = land(write, s)
    assert after is not None
    assert balance(p, after, now) == before + gained <= capacity * MILLI
    assert after.consumed == s.consumed  # a top-up is not consumption


@settings(max_examples=200, deadline=None)
@given(
    capacity=amounts,
    refill=amounts,
    period=st.integers(1, 3_600),
    spent=amounts,
    other=amounts,
    n=st.integers(1, 2_000),
)
def test_a_dripping_top_up_grants_what_it_planned_even_after_a_concurrent_debit(
    capacity: int, refill: int, period: int, spent: int, other: int, n: int
) -> None:
    p = rate(capacity, refill, period)
    s = debit(p, State(), MONDAY, min(spent, capacity) * MILLI)
    assert s is not None
    write, gained = operations.plan_top_up(p, s, MONDAY, WHOLE, n * MILLI)
    raced = debit(p, s, MONDAY, other * MILLI, enforce=False)
    assert raced is not None
    after = land(write, raced)
    assert after is not None  # a debit only adds debt: the guard still holds
    assert balance(p, after, MONDAY) == balance(p, raced, MONDAY) + gained


@given(capacity=amounts, refill=amounts, spent=st.integers(0, 3_000), elapsed=st.integers(0, 10**6))
def test_a_dripping_reset_fills_to_the_ceiling_and_forgives_debt(
    capacity: int, refill: int, spent: int, elapsed: int
) -> None:
    p = rate(capacity, refill, 60)
    s = debit(p, State(), MONDAY, spent * MILLI, enforce=False)
    assert s is not None
    now = MONDAY + elapsed
    write, gained = operations.plan_reset(p, s, now, WHOLE)
    after = land(write, s)
    assert after is not None
    assert balance(p, after, now) == capacity * MILLI == balance(p, s, now) + gained


# --- shards --------------------------------------------------------------------------------------


@given(amount=st.integers(0, 10**9), shards=st.sampled_from([1, 2, 4, 8, 16, 32]))
def test_a_top_up_is_spread_exactly_in_whole_units(amount: int, shards: int) -> None:
    milli = amount * MILLI
    parts = operations.spread(milli, Slot(0, shards).all())
    assert sum(parts) == milli and len(parts) == shards
    assert all(part % MILLI == 0 for part in parts)
    assert max(parts) - min(parts) <= MILLI


@given(rooms=st.lists(st.integers(0, 10**6), min_size=1, max_size=32), amount=st.integers(0, 10**7))
def test_allocation_gives_min_of_amount_and_total_room(rooms: list[int], amount: int) -> None:
    given_ = operations.allocate(rooms, amount)
    assert sum(given_) == min(amount, sum(rooms))
    assert all(0 <= g <= r for g, r in zip(given_, rooms, strict=True))


@given(capacity=st.integers(1, 10**6), bought=st.integers(1, 10**6), spent=st.integers(0, 100))
def test_a_sharded_top_up_adds_the_exact_total_over_shards(
    capacity: int, bought: int, spent: int
) -> None:
    p, slots = weekly(capacity), Slot(0, 4).all()
    states = [bucket.full_state(p, slot) for slot in slots]
    states[0] = debit_sharded(p, states[0], slots[0], spent)
    shares = operations.spread(bought * MILLI, slots)
    total = 0
    for i, share in enumerate(shares):
        write, gained = operations.plan_top_up(p, states[i], MONDAY, slots[i], share)
        states[i] = land(write, states[i]) or states[i]
        total += gained
    assert total == bought * MILLI
    ceilings = sum(
        bucket.view(p, s, MONDAY, slot).ceiling for s, slot in zip(states, slots, strict=True)
    )
    assert ceilings == capacity * MILLI + bought * MILLI


def debit_sharded(p: Params, s: State, slot: Slot, amount: int) -> State:
    write = bucket.plan_debit(p, s, MONDAY, slot, amount, enforce=False)
    return land(write, s) or s


@given(at=st.integers(0, 8 * WEEK))
def test_a_quota_with_several_schedules_resets_at_the_latest_edge_of_any(at: int) -> None:
    p = Params(
        "credits",
        Kind.CALENDAR,
        100 * MILLI,
        0,
        60_000,
        cron="0 0 * * 1|UTC;0 12 * * 4|Europe/Paris",
    )
    now = MONDAY + at
    start, end = p.period_start(now, None), p.next_reset_ms(now, None)
    assert start is not None and end is not None and start <= now < end
    for edges in p.reset_edges():  # no edge of any schedule falls inside the period
        assert (edges.next_edge_ms(start) or 0) >= end
    assert end - start in (
        3 * 86_400_000 + 11 * HOUR,  # Monday 00:00 UTC to Thursday 11:00 UTC (12:00 CET)
        4 * 86_400_000 - 11 * HOUR,
    )


# --- the rejection cache's question --------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(["rate", "weekly", "session"]),
    capacity=amounts,
    v=st.integers(-2_000 * MILLI, 2_000 * MILLI),
    w=st.one_of(st.none(), st.integers(MONDAY - 2 * WEEK, MONDAY + WEEK)),
    tu=st.integers(0, 500 * MILLI),
    at=offsets,
    amount=st.integers(1, 1_500 * MILLI),
    shards=st.sampled_from([1, 2, 4]),
)
def test_refuses_is_exactly_when_an_enforced_checked_debit_is_planned_as_none(
    kind: str, capacity: int, v: int, w: int | None, tu: int, at: int, amount: int, shards: int
) -> None:
    params = {"rate": rate(capacity, capacity, 60), "weekly": weekly(capacity)}.get(
        kind, session(capacity)
    )
    now = MONDAY + at
    if kind == "rate":  # a debt clock around now
        state = State(v=now * params.refill + v * params.period_ms // MILLI)
    else:
        state = State(v=v, w=w, tu=tu)
    for shard in range(shards):
        slot = Slot(shard, shards)
        planned = bucket.plan_debit(params, state, now, slot, amount, enforce=True, check=True)
        assert bucket.refuses(params, state, now, slot, amount) is (planned is None)
