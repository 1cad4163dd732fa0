"""Property tests of the pure bucket maths (core/bucket.py)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from zae_limiter.core import bucket, schedule, waits
from zae_limiter.core.bucket import MILLI, WHOLE, Kind, Params, State
from zae_limiter.core.expiry import expiry_span_ms

T0 = 1_767_571_200_000


def rate(capacity: int, refill: int, period_s: int) -> Params:
    return Params("r", Kind.RATE, capacity * MILLI, refill * MILLI, period_s * 1000)


def debit(p: Params, s: State, now: int, amount: int, enforce: bool = True) -> State | None:
    write = bucket.plan_debit(p, s, now, WHOLE, amount, enforce=enforce)
    return None if write is None else write.result


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 10_000),
    refill=st.integers(1, 10_000),
    period=st.integers(1, 86_400),
    steps=st.lists(st.integers(0, 5_000), min_size=1, max_size=60),
)
def test_refill_never_drifts_over_many_small_steps(
    capacity: int, refill: int, period: int, steps: list[int]
) -> None:
    """Touching a bucket often refills exactly what touching it once would."""
    p = rate(capacity, refill, period)
    drained = debit(p, State(), T0, capacity * MILLI)
    assert drained is not None
    often = drained
    now = T0
    for step in steps:
        now += step
        touched = debit(p, often, now, 0, enforce=False)
        assert touched is not None
        often = touched
    once = bucket.view(p, drained, now, WHOLE).balance
    assert bucket.view(p, often, now, WHOLE).balance == once
    exact = min(capacity * MILLI, (now - T0) * refill * MILLI // (period * 1000))
    assert abs(once - exact) <= 1


@given(
    capacity=st.integers(1, 1_000),
    elapsed=st.integers(0, 10**9),
    spent=st.integers(0, 1_000),
)
def test_refill_is_never_negative_and_never_above_the_ceiling(
    capacity: int, elapsed: int, spent: int
) -> None:
    p = rate(capacity, capacity, 60)
    s = debit(p, State(), T0, min(spent, capacity) * MILLI)
    assert s is not None
    before = bucket.view(p, s, T0, WHOLE).balance
    after = bucket.view(p, s, T0 + elapsed, WHOLE).balance
    assert before <= after <= capacity * MILLI


@given(
    old_cap=st.integers(1, 1_000),
    new_cap=st.integers(1, 1_000),
    spent=st.integers(0, 1_000),
)
def test_a_lowered_ceiling_cuts_the_balance_and_a_raised_one_keeps_it(
    old_cap: int, new_cap: int, spent: int
) -> None:
    old, new = rate(old_cap, old_cap, 60), rate(new_cap, new_cap, 60)
    s = debit(old, State(), T0, min(spent, old_cap) * MILLI)
    assert s is not None
    balance = bucket.view(old, s, T0, WHOLE).balance
    converted = bucket.convert(old, new, s, T0, WHOLE)
    assert bucket.view(new, converted, T0, WHOLE).balance == min(balance, new_cap * MILLI)


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 1_000),
    refill=st.integers(1, 1_000),
    period=st.integers(1, 3_600),
    spent=st.integers(1, 1_000),
    wanted=st.integers(1, 2_000),
)
def test_retry_after_is_the_smallest_wait_that_admits(
    capacity: int, refill: int, period: int, spent: int, wanted: int
) -> None:
    p = rate(capacity, refill, period)
    s = debit(p, State(), T0, min(spent, capacity) * MILLI)
    assert s is not None
    amount = min(wanted, capacity) * MILLI
    wait = waits.retry_after_ms(p, s, T0, WHOLE, amount)
    if bucket.view(p, s, T0, WHOLE).balance >= amount:
        assert wait == 0
        return
    assert bucket.view(p, s, T0 + wait, WHOLE).balance >= amount
    assert bucket.view(p, s, T0 + wait - 2, WHOLE).balance < amount


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 1_000),
    refill=st.integers(1, 1_000),
    period=st.integers(1, 3_600),
    spent=st.integers(0, 3_000),
)
def test_next_unit_is_when_one_more_whole_unit_can_be_used(
    capacity: int, refill: int, period: int, spent: int
) -> None:
    """The RateLimit `t` (draft -11): until then no more than the whole units there now can be
    used (from debt: no more than 0 until the balance is 1); from then on, one more. A full
    bucket: used up now, one unit drips in after that long."""
    p = rate(capacity, refill, period)
    s = debit(p, State(), T0, spent * MILLI, enforce=False)
    assert s is not None
    whole = max(0, bucket.view(p, s, T0, WHOLE).balance // MILLI)
    wait = waits.next_unit_ms(p, s, T0, WHOLE)
    assert wait is not None and wait > 0
    if whole == capacity:  # full: the wait of one unit after using them all
        s = debit(p, s, T0, capacity * MILLI)
        assert s is not None and waits.next_unit_ms(p, s, T0, WHOLE) == wait
        whole = 0
    assert bucket.view(p, s, T0 + wait, WHOLE).balance >= (whole + 1) * MILLI
    assert bucket.view(p, s, T0 + wait - 2, WHOLE).balance < (whole + 1) * MILLI


def test_a_request_above_the_ceiling_still_gets_a_finite_wait() -> None:
    """Spec example: 500 units against 100/day waits 4 days and 1 ms."""
    p = rate(100, 100, 86_400)
    assert waits.retry_after_ms(p, State(), T0, WHOLE, 500 * MILLI) == 345_600_001


@given(amounts=st.lists(st.integers(1, 50), min_size=1, max_size=40))
def test_debits_commute_while_the_bucket_is_not_full(amounts: list[int]) -> None:
    """Any order of the same debits at one instant leaves the same state."""
    p = rate(10_000, 10, 60)
    forward, backward = State(), State()
    for a in amounts:
        forward = debit(p, forward, T0, a * MILLI) or forward
    for a in reversed(amounts):
        backward = debit(p, backward, T0, a * MILLI) or backward
    assert bucket.view(p, forward, T0, WHOLE).balance == bucket.view(p, backward, T0, WHOLE).balance


@given(spent=st.integers(1, 100), credit=st.integers(1, 200))
def test_credits_never_raise_a_balance_above_its_ceiling(spent: int, credit: int) -> None:
    p = rate(100, 1, 3_600)
    s = debit(p, State(), T0, spent * MILLI)
    assert s is not None
    back = bucket.plan_credit(p, s, T0 + 1, WHOLE, credit * MILLI, None).result
    assert bucket.view(p, back, T0 + 1, WHOLE).balance <= 100 * MILLI


def test_a_guard_refuses_a_debit_the_image_cannot_admit() -> None:
    p = rate(10, 10, 60)
    assert bucket.plan_debit(p, State(), T0, WHOLE, 11 * MILLI, enforce=True) is None
    s = debit(p, State(), T0, 10 * MILLI)
    assert s is not None
    assert bucket.plan_debit(p, s, T0, WHOLE, 1, enforce=True) is None
    # soft (not enforced) may go into debt
    soft = bucket.plan_debit(p, s, T0, WHOLE, 5 * MILLI, enforce=False)
    assert soft is not None
    assert bucket.view(p, soft.result, T0, WHOLE).balance == -5 * MILLI


# --- retry_after across schedule entries (docs/limits-and-time.md) ----------------------------

HOUR_12 = 1_767_571_200_000 + 12 * 3_600_000  # 2026-01-05 12:00 UTC
DOUBLE_AT_NOON = schedule.encode([{"cron": "* 12 * * *", "tz": "UTC", "scale": 2}])


def scheduled(capacity: int, refill: int, period_s: int, entries: str, now: int) -> Params:
    base = (capacity * MILLI, refill * MILLI, period_s * 1000)
    return Params("r", Kind.RATE, *base, schedule=entries, base=base).scheduled(now)


def holding(p: Params, now: int, balance: int) -> State:
    """The state of `p` holding `balance` (milli) at `now`."""
    return State(v=now * p.shard_refill(WHOLE) + (p.shard_capacity(WHOLE) - balance) * p.period_ms)


def test_an_entry_that_begins_speeds_the_wait_up() -> None:
    now = HOUR_12 - 30_000  # 11:59:30: 1/s now, 2/s from noon
    p = scheduled(60, 60, 60, DOUBLE_AT_NOON, now)
    # 30 s at 1/s, then the other 30 units at 2/s: 15 s
    assert waits.retry_after_ms(p, holding(p, now, 0), now, WHOLE, 60 * MILLI) == 45_001
    plain = rate(60, 60, 60)
    assert waits.retry_after_ms(plain, holding(plain, now, 0), now, WHOLE, 60 * MILLI) == 60_001


def test_an_entry_that_ends_slows_the_wait_down() -> None:
    now = HOUR_12 + 59 * 60_000 + 30_000  # 12:59:30: 2/s until 13:00, then 1/s
    p = scheduled(60, 60, 60, DOUBLE_AT_NOON, now)
    assert p.shard_capacity(WHOLE) == 120 * MILLI
    # from 12:59:50: 20 units by 13:00, then the other 20 at 1/s
    later = now + 20_000
    assert waits.retry_after_ms(p, holding(p, later, 0), later, WHOLE, 40 * MILLI) == 30_001
    # 100 is above the base ceiling (60): it fits only in tomorrow's noon entry, from 60 at 2/s
    tomorrow_noon = HOUR_12 + 86_400_000
    assert waits.retry_after_ms(p, holding(p, now, 0), now, WHOLE, 100 * MILLI) == (
        tomorrow_noon + 20_000 - now + 1
    )
    # fits before the entry ends: the entry's own rate only
    assert waits.retry_after_ms(p, holding(p, now, 100 * MILLI), now, WHOLE, 110 * MILLI) == 5_001


def test_a_lower_entry_in_between_cuts_the_balance_and_the_wait_resumes_after_it() -> None:
    entries = schedule.encode([{"cron": "* 12 * * *", "tz": "UTC", "capacity": 10}])
    now = HOUR_12 - 10_000  # 11:59:50: 40 of 60, wants 55; at noon cut to 10 until 13:00
    p = scheduled(60, 60, 60, entries, now)
    wait = waits.retry_after_ms(p, holding(p, now, 40 * MILLI), now, WHOLE, 55 * MILLI)
    assert wait == (3_600_000 + 10_000) + 45_000 + 1  # 13:00:45, from 10 at 1/s


def restamped_every_minute(p: Params, s: State, start: int, at: int) -> int:
    """The balance at `at` if the item were restamped at every minute an entry changed."""
    minute = start // 60_000 + 1
    while minute * 60_000 <= at:
        moved = p.scheduled(minute * 60_000)
        if moved is not p:
            s = bucket.convert(p, moved, s, minute * 60_000, WHOLE)
            p = moved
        minute += 1
    return bucket.view(p, s, at, WHOLE).balance


def restamped_once(p: Params, s: State, last_write: int, at: int) -> int:
    """The balance at `at` as the limiter finds it: restamped on its first write after an edge
    (even when the entry in force is the stamped one again)."""
    moved, converted = bucket.in_force(p, s, at, WHOLE, since=last_write)
    return bucket.view(moved, converted, at, WHOLE).balance


@settings(max_examples=150, deadline=None)
@example(capacity=100, refill=10, period=60, held=0, wanted=50, offset=57 * 60_000)
@example(capacity=100, refill=10, period=60, held=0, wanted=50, offset=7 * 60_000)
@example(capacity=70, refill=1, period=138, held=0, wanted=35, offset=600_000)  # out and back
@example(capacity=70, refill=1, period=137, held=0, wanted=35, offset=1_668)
@given(
    capacity=st.integers(2, 200),
    refill=st.integers(1, 200),
    period=st.integers(1, 900),
    held=st.integers(0, 200),
    wanted=st.integers(1, 200),
    offset=st.integers(0, 3_600_000),
)
def test_the_wait_across_entries_admits_then_and_not_before(
    capacity: int, refill: int, period: int, held: int, wanted: int, offset: int
) -> None:
    entries = schedule.encode(
        [
            {"cron": "0-9 * * * *", "tz": "UTC", "scale": 3},
            {"cron": "30-44 * * * *", "tz": "UTC", "capacity": max(1, capacity // 2)},
        ]
    )
    now = T0 + offset
    p = scheduled(capacity, refill, period, entries, now)
    state = holding(p, now, min(held, capacity // 2) * MILLI)
    amount = min(wanted, capacity // 2) * MILLI
    wait = waits.retry_after_ms(p, state, now, WHOLE, amount)
    if bucket.view(p, state, now, WHOLE).balance >= amount:
        assert wait == 0
        return
    # the limiter, restamping on its next write (last written at `now`): exact
    assert restamped_once(p, state, now, now + wait) >= amount
    assert restamped_once(p, state, now, now + wait - 2) < amount
    # a restamp at every entry edge agrees, within the milli-unit each restamp rounds away
    edges = (wait // 60_000 + 2) * 2
    assert restamped_every_minute(p, state, now, now + wait) >= amount - edges
    assert restamped_every_minute(p, state, now, now + wait - 2) < amount


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 10_000),
    refill=st.integers(1, 10_000),
    period=st.integers(1, 86_400),
    spent=st.integers(0, 10_000),
)
def test_a_rate_limits_expiry_span_is_its_debt_then_a_refill_from_empty(
    capacity: int, refill: int, period: int, spent: int
) -> None:
    """The item's expiry (acquire/planning.ttl_for) rests on `expiry_span_ms`: full again just
    after the debt is repaid, then one refill from empty (`refill_ms`) more."""
    p = rate(capacity, refill, period)
    s = debit(p, State(), T0, min(spent, capacity) * MILLI)
    assert s is not None
    from_empty = bucket.refill_ms(p.capacity, p.refill, p.period_ms)
    debt_ms = expiry_span_ms(p, s, T0) - from_empty
    assert bucket.view(p, s, T0 + debt_ms + 1, WHOLE).balance == p.capacity
    if debt_ms > 0:
        assert bucket.view(p, s, T0 + debt_ms - 1, WHOLE).balance < p.capacity
    drained = debit(p, State(), T0, p.capacity)
    assert drained is not None
    assert bucket.view(p, drained, T0 + from_empty + 1, WHOLE).balance == p.capacity
    assert bucket.view(p, drained, T0 + from_empty - 1, WHOLE).balance < p.capacity


def test_the_refill_span_in_seconds_rounds_up_to_at_least_one() -> None:
    """A RateLimit policy's window (lease_view): 10 per 3 s refills in 4 s, not 3.33."""
    assert bucket.refill_seconds(10, 3, 1_000) == 4
    assert bucket.refill_seconds(60, 60, 60_000) == 60
    assert bucket.refill_seconds(1, 1_000, 1_000) == 1
    assert bucket.refill_seconds(10, 0, 1_000) is None


@given(now=st.integers(0, 10**13), period=st.integers(1, 86_400_000))
def test_the_refill_period_a_moment_falls_in_is_epoch_aligned(now: int, period: int) -> None:
    p = Params("r", Kind.RATE, MILLI, MILLI, period)
    start = bucket.refill_period_start(p, now)
    assert start % period == 0 and start <= now < start + period
