"""Property tests of the pure bucket maths (core/bucket.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zae_limiter.core import bucket
from zae_limiter.core.bucket import MILLI, Kind, Params, State

T0 = 1_767_571_200_000


def rate(capacity: int, refill: int, period_s: int) -> Params:
    return Params("r", Kind.RATE, capacity * MILLI, refill * MILLI, period_s * 1000)


def debit(p: Params, s: State, now: int, amount: int, enforce: bool = True) -> State | None:
    write = bucket.plan_debit(p, s, now, 1, amount, enforce=enforce)
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
    once = bucket.view(p, drained, now, 1).balance
    assert bucket.view(p, often, now, 1).balance == once
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
    before = bucket.view(p, s, T0, 1).balance
    after = bucket.view(p, s, T0 + elapsed, 1).balance
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
    balance = bucket.view(old, s, T0, 1).balance
    converted = bucket.convert(old, new, s, T0, 1, 1)
    assert bucket.view(new, converted, T0, 1).balance == min(balance, new_cap * MILLI)


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
    wait = bucket.retry_after_ms(p, s, T0, 1, amount)
    if bucket.view(p, s, T0, 1).balance >= amount:
        assert wait == 0
        return
    assert bucket.view(p, s, T0 + wait, 1).balance >= amount
    assert bucket.view(p, s, T0 + wait - 2, 1).balance < amount


def test_a_request_above_the_ceiling_still_gets_a_finite_wait() -> None:
    """Spec example: 500 units against 100/day waits 4 days and 1 ms."""
    p = rate(100, 100, 86_400)
    assert bucket.retry_after_ms(p, State(), T0, 1, 500 * MILLI) == 345_600_001


@given(amounts=st.lists(st.integers(1, 50), min_size=1, max_size=40))
def test_debits_commute_while_the_bucket_is_not_full(amounts: list[int]) -> None:
    """Any order of the same debits at one instant leaves the same state."""
    p = rate(10_000, 10, 60)
    forward, backward = State(), State()
    for a in amounts:
        forward = debit(p, forward, T0, a * MILLI) or forward
    for a in reversed(amounts):
        backward = debit(p, backward, T0, a * MILLI) or backward
    assert bucket.view(p, forward, T0, 1).balance == bucket.view(p, backward, T0, 1).balance


@given(spent=st.integers(1, 100), credit=st.integers(1, 200))
def test_credits_never_raise_a_balance_above_its_ceiling(spent: int, credit: int) -> None:
    p = rate(100, 1, 3_600)
    s = debit(p, State(), T0, spent * MILLI)
    assert s is not None
    back = bucket.plan_credit(p, s, T0 + 1, 1, credit * MILLI, None).result
    assert bucket.view(p, back, T0 + 1, 1).balance <= 100 * MILLI


def test_a_guard_refuses_a_debit_the_image_cannot_admit() -> None:
    p = rate(10, 10, 60)
    assert bucket.plan_debit(p, State(), T0, 1, 11 * MILLI, enforce=True) is None
    s = debit(p, State(), T0, 10 * MILLI)
    assert s is not None
    assert bucket.plan_debit(p, s, T0, 1, 1, enforce=True) is None
    # soft (not enforced) may go into debt
    soft = bucket.plan_debit(p, s, T0, 1, 5 * MILLI, enforce=False)
    assert soft is not None
    assert bucket.view(p, soft.result, T0, 1).balance == -5 * MILLI
