"""Regional shards and transfers, pure (core.regions, core.transfers): every shard has one
Region, a transfer moves exactly what it says (a quota to the milli-unit, a dripping limit up to
the recipient's ceiling), never takes a donor below zero, and nothing is minted."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st
from test_shard_math import land

from zae_limiter.core import regions, transfers
from zae_limiter.core.bucket import MILLI, Kind, Params, Slot, State, exact_balance, view

T0 = 1_767_571_200_000 + 3_600_000  # 2026-01-05 01:00 UTC: a daily quota period is open
DAY = 86_400_000
P = 60_000  # the dripping limit's period
counts = st.sampled_from([1, 2, 4, 8, 16, 32])


@settings(max_examples=40)
@given(region_count=st.integers(1, 5), doublings=st.integers(0, 5))
def test_every_shard_of_a_regional_bucket_has_exactly_one_region(
    region_count: int, doublings: int
) -> None:
    shards = regions.regional_count(region_count) * 2**doublings
    assert shards >= region_count and shards & (shards - 1) == 0
    owned = [regions.owned(r, shards, region_count) for r in range(region_count)]
    assert sorted(s for mine in owned for s in mine) == list(range(shards))
    assert all(mine for mine in owned)  # every Region has at least one shard
    assert regions.is_regional(shards, region_count) == (region_count > 1)


def test_a_bucket_with_fewer_shards_than_regions_is_written_by_anyone() -> None:
    assert regions.owned(2, 2, 3) == [0, 1]
    assert not regions.is_regional(2, 3)
    assert regions.regional_count(3) == 4 and regions.regional_count(2) == 2


def test_writers_name_their_region_and_other_regions_make_an_item_contested() -> None:
    mine, theirs = regions.regional_writer(1, "abc"), regions.regional_writer(2, "x:y")
    assert (regions.writer_region(mine), regions.writer_region(theirs)) == (1, 2)
    assert regions.writer_region("plainId") is None
    now = T0
    assert not regions.contested({mine: now, "plainId": now}, 1, now)
    assert regions.contested({theirs: now - 1_000}, 1, now)
    assert not regions.contested({theirs: now - regions.CONTESTED_MS}, 1, now)


def _quota(capacity: int) -> Params:
    return Params("q", Kind.CALENDAR, capacity * MILLI, 0, DAY, cron="0 0 * * *|UTC")


def _rate(capacity: int, refill: int) -> Params:
    return Params("r", Kind.RATE, capacity * MILLI, refill * MILLI, 60_000)


quota_states = st.builds(
    lambda used, tu: (used, tu), st.integers(0, 10_000), st.integers(-5_000, 5_000)
)


@settings(max_examples=40)
@given(
    capacity=st.integers(8, 10_000),
    count=counts,
    donor_used=st.integers(0, 10_000),
    recipient_used=st.integers(0, 10_000),
    amount=st.integers(1, 20_000),
    tu=st.integers(0, 3_000),
)
def test_a_quota_transfer_moves_exactly_its_amount_and_never_below_zero(
    capacity: int,
    count: int,
    donor_used: int,
    recipient_used: int,
    amount: int,
    tu: int,
) -> None:
    params = _quota(capacity)
    period = T0 - 3_600_000
    donor_slot, recipient_slot = Slot(0, count), Slot(count - 1, count)
    donor_cap = params.shard_capacity(donor_slot) + tu * MILLI
    donor = State(v=max(0, donor_cap - donor_used * MILLI), w=period, tu=tu * MILLI)
    recipient_cap = params.shard_capacity(recipient_slot)
    recipient = State(v=max(0, recipient_cap - recipient_used * MILLI), w=period)
    milli = amount * MILLI
    gave = transfers.give(params, donor, T0, donor_slot, milli)
    if milli > view(params, donor, T0, donor_slot).balance:
        assert gave is None  # never below zero
        return
    assert gave is not None and gave.consumed == 0
    donor_after = land(gave, donor)
    took, taken = transfers.take(params, recipient, T0, recipient_slot, milli, period)
    recipient_after = land(took, recipient)
    assert taken == milli and took.consumed == 0
    before = (
        view(params, donor, T0, donor_slot).balance
        + view(params, recipient, T0, recipient_slot).balance
    )
    after_d = view(params, donor_after, T0, donor_slot)
    after_r = view(params, recipient_after, T0, recipient_slot)
    assert after_d.balance + after_r.balance == before  # nothing minted, nothing lost
    assert after_d.balance >= 0
    assert after_d.ceiling + after_r.ceiling == donor_cap + recipient_cap  # ceilings move too


def test_a_quota_transfer_taken_in_another_period_takes_nothing() -> None:
    params = _quota(100)
    state = State(v=10 * MILLI, w=T0 - 3_600_000)
    took, taken = transfers.take(params, state, T0 + DAY, Slot(), 5 * MILLI, T0 - 3_600_000)
    assert taken == 0 and land(took, state) == state


@settings(max_examples=40)
@given(
    capacity=st.integers(2, 1_000),
    refill=st.integers(1, 1_000),
    count=counts,
    donor_debt=st.integers(0, 1_000),
    recipient_debt=st.integers(0, 1_000),
    amount=st.integers(1, 1_000),
    ahead=st.integers(0, 60_000),
)
def test_a_dripping_transfer_takes_at_most_the_room_and_mints_nothing(
    capacity: int,
    refill: int,
    count: int,
    donor_debt: int,
    recipient_debt: int,
    amount: int,
    ahead: int,
) -> None:
    params = _rate(capacity, refill)
    slots = (Slot(0, count), Slot(count - 1, count))
    states = [
        State(
            v=T0 * params.shard_refill(slot)
            + min(debt * MILLI, params.shard_capacity(slot)) * 60_000
        )
        for slot, debt in zip(slots, (donor_debt, recipient_debt), strict=True)
    ]
    donor, recipient = states
    milli = amount * MILLI
    now = T0 + ahead
    gave = transfers.give(params, donor, now, slots[0], milli)
    if gave is None:
        assert transfers.available(params, donor, now, slots[0]) < milli
        return
    donor_after = land(gave, donor)
    took, taken = transfers.take(params, recipient, now, slots[1], milli, None)
    recipient_after = land(took, recipient)
    assert taken <= milli
    room = transfers.room(params, recipient, now, slots[1])
    assert room is not None and taken <= room
    before = sum(exact_balance(params, s, now, slot) for s, slot in zip(states, slots, strict=True))
    after = exact_balance(params, donor_after, now, slots[0]) + exact_balance(
        params, recipient_after, now, slots[1]
    )
    assert after <= before  # never minted
    assert after >= before - milli + Fraction(taken)  # only what did not fit is lost
    assert exact_balance(params, recipient_after, now, slots[1]) <= params.shard_capacity(slots[1])


@settings(max_examples=40)
@given(
    wanted=st.dictionaries(st.sampled_from("abc"), st.integers(1, 50_000), max_size=3),
    can_give=st.dictionaries(st.sampled_from("abc"), st.integers(0, 100_000), max_size=3),
    bounded=st.booleans(),
    room=st.integers(0, 100_000),
)
def test_moves_cover_the_shortfall_within_what_can_be_given_and_taken(
    wanted: dict[str, int], can_give: dict[str, int], bounded: bool, room: int
) -> None:
    can_take: dict[str, int | None] = {n: (room if bounded else None) for n in "abc"}
    planned = transfers.moves(wanted, can_give, can_take)
    if not wanted:
        assert planned == {}
        return
    if not planned:
        assert any(
            (min(can_give.get(n, 0), room) if bounded else can_give.get(n, 0))
            < (w if bounded else -(-w // MILLI) * MILLI)
            for n, w in wanted.items()
        )
        return
    for name, want in wanted.items():
        moved = planned[name]
        assert want <= moved <= can_give.get(name, 0)
        if bounded:
            assert moved <= room
        else:
            assert moved % MILLI == 0
