"""A raised ceiling is not use (reference §5.20, docs/alerts.md): the headroom a raise adds is
taken off a limit's use until refill pays it (core.headroom), recorded by the restamp and read by
the alert detector (alerts.detect)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from zae_limiter import Limit
from zae_limiter.acquire import planning
from zae_limiter.alerts.detect import crossings
from zae_limiter.config import to_params
from zae_limiter.core import bucket, headroom, schedule
from zae_limiter.core.bucket import MILLI, WHOLE, Headroom, Kind, Params, State
from zae_limiter.core.images import BucketImage, Stamp
from zae_limiter.dynamo import bucket_items, codec
from zae_limiter.dynamo.bucket_wire import parse_updated, parse_wire
from zae_limiter.dynamo.stream_records import StreamRecord

T0 = 1_767_571_200_000 + 9 * 3_600_000  # 2026-01-05 09:00 UTC (a Monday)


def rpm(capacity: int, *alerts: int) -> Params:
    return to_params(Limit.per_minute("rpm", capacity, alert_at=alerts))


def weekly(amount: int, *alerts: int) -> Params:
    return to_params(Limit.quota("weekly", amount, cron="0 0 * * 1", alert_at=alerts))


def image(params: Params, state: State, now: int, *, rearms: int = 0) -> BucketImage:
    return BucketImage(
        "ns1", "u1", "api", 0, Stamp((params,)), 1, {params.name: state}, written_at=now,
        generation="g", rearms=rearms,
    )  # fmt: skip


def restamped(old: BucketImage, params: Params, now: int) -> BucketImage:
    stamp = Stamp((params,))
    states = planning.restamped_states(old, stamp, now)
    return replace(old, stamp=stamp, stamp_seq=old.stamp_seq + 1, states=states, written_at=now)


def debited(old: BucketImage, amount: int, now: int) -> BucketImage:
    (params,) = old.stamp.limits
    write = bucket.plan_debit(params, old.states[params.name], now, old.slot, amount, enforce=False)
    assert write is not None
    return replace(old, states={params.name: write.result}, written_at=now)


def record(old: BucketImage, new: BucketImage) -> StreamRecord:
    item = bucket_items.item_of(new)
    old_wire, new_wire = codec.encode_item(bucket_items.item_of(old)), codec.encode_item(item)
    return StreamRecord("e", "MODIFY", "1", item["PK"], item["SK"], old_wire, new_wire, None, False)


def crossed_by(start: BucketImage, amounts: list[int], now: int) -> list[tuple[int, int]]:
    """(threshold, used whole units) of every crossing the debits of `amounts` make."""
    out, item = [], start
    for amount in amounts:
        after = debited(item, amount * MILLI, now)
        out += [(c.threshold, c.used_milli // MILLI) for c in crossings(record(item, after))]
        item = after
    return out


# --- the detector on crafted images --------------------------------------------------------------


def test_a_raise_on_a_full_rate_bucket_is_not_use() -> None:
    """rpm 20 -> 40 on a full bucket: 12 calls are 12 of 40 (below 80 %), and 32 real units
    cross 80 % (before: the raise's 20 counted as use, and the 12th call crossed)."""
    raised = restamped(image(rpm(20), State(), T0), rpm(40, 50, 80), T0 + 1000)
    head = raised.states["rpm"].headroom
    assert head is not None and head.shards == 1 and head.rearms == 0
    assert headroom.use(raised.stamp.limits[0], raised.states["rpm"], T0 + 1000, WHOLE, 0) == 0
    assert crossed_by(raised, [1] * 12, T0 + 1000) == []
    assert crossed_by(raised, [1] * 32, T0 + 1000) == [(50, 20), (80, 32)]


def test_the_headroom_refills_first_then_the_raise_is_forgotten() -> None:
    raised = restamped(image(rpm(20), State(), T0), rpm(40, 80), T0)
    p, state = raised.stamp.limits[0], raised.states["rpm"]
    assert headroom.unrefilled(p, state, T0 + 15_000, WHOLE, 0) == 10 * MILLI  # 40/min: 10 in 15 s
    assert headroom.unrefilled(p, state, T0 + 30_000, WHOLE, 0) == 0
    later = T0 + 31_000  # full again: 32 units cross 80 % as on any bucket
    assert crossed_by(replace(raised, written_at=later), [32], later) == [(80, 32)]


def test_use_from_before_the_raise_stays_use() -> None:
    """10 of 20 used, raised to 40: 10 is still use (22 more cross 80 %)."""
    used = debited(image(rpm(20), State(), T0), 10 * MILLI, T0)
    raised = restamped(used, rpm(40, 80), T0)
    assert headroom.use(raised.stamp.limits[0], raised.states["rpm"], T0, WHOLE, 0) == 10 * MILLI
    assert crossed_by(raised, [21, 1], T0) == [(80, 32)]


def test_two_raises_add_up_and_a_lower_takes_the_headroom_back() -> None:
    first = restamped(image(rpm(20), State(), T0), rpm(40), T0)
    second = restamped(first, rpm(80), T0 + 15_000)  # 10 of the first 20 refilled, +40
    p = second.stamp.limits[0]
    assert headroom.unrefilled(p, second.states["rpm"], T0 + 15_000, WHOLE, 0) == 50 * MILLI
    lowered = restamped(second, rpm(50), T0 + 15_000)  # 30 of the 50 taken back
    q, state = lowered.stamp.limits[0], lowered.states["rpm"]
    assert headroom.unrefilled(q, state, T0 + 15_000, WHOLE, 0) == 20 * MILLI
    assert headroom.use(q, state, T0 + 15_000, WHOLE, 0) == 0
    assert restamped(lowered, rpm(20), T0 + 15_000).states["rpm"].headroom is None


def test_a_quota_raise_lasts_its_period_and_a_top_up_ends_it() -> None:
    """weekly 100 -> 200 with 10 used: 89 more are 99 of 200 (below 50 %), the next crosses;
    the next period (or a top-up or reset: another re-arm count) forgets the raise."""
    used = debited(image(weekly(100), bucket.full_state(weekly(100), WHOLE), T0), 10 * MILLI, T0)
    raised = restamped(used, weekly(200, 50), T0 + 1000)
    p, state = raised.stamp.limits[0], raised.states["weekly"]
    assert state.headroom == Headroom(100 * MILLI, 0, 1, state.w)
    assert headroom.use(p, state, T0 + 1000, WHOLE, 0) == 10 * MILLI
    assert crossed_by(raised, [89, 1], T0 + 1000) == [(50, 100)]
    assert headroom.use(p, state, T0 + 1000, WHOLE, 1) == 110 * MILLI  # re-armed: forgotten
    next_week = T0 + 7 * 86_400_000
    assert headroom.unrefilled(p, state, next_week, WHOLE, 0) == 0


def test_a_split_forgets_the_headroom() -> None:
    raised = restamped(image(rpm(20), State(), T0), rpm(40), T0)
    p, state = raised.stamp.limits[0], raised.states["rpm"]
    assert headroom.unrefilled(p, state, T0, bucket.Slot(0, 2), 0) == 0


def test_a_schedule_entry_that_raises_the_ceiling_is_headroom_too() -> None:
    """rpm 60, doubled from noon: a bucket full at 11:59 and restamped at 12:00:30 has had the
    entry's 60 raised at noon, 60 of it refilled since (2/s for 30 s): none left."""
    noon = 1_767_571_200_000 + 12 * 3_600_000
    entries = schedule.encode([{"cron": "* 12 * * *", "tz": "UTC", "scale": 2}])
    base = (60 * MILLI, 60 * MILLI, 60_000)
    before = Params("rpm", Kind.RATE, *base, schedule=entries, base=base).scheduled(noon - 60_000)
    full = image(before, State(), noon - 60_000)
    at = noon + 10_000  # 20 of the 60 refilled
    moved = restamped(full, before.scheduled(at), at)
    p, state = moved.stamp.limits[0], moved.states["rpm"]
    assert p.shard_capacity(WHOLE) == 120 * MILLI
    assert headroom.unrefilled(p, state, at, WHOLE, 0) == 40 * MILLI
    assert headroom.use(p, state, at, WHOLE, 0) == 0


def test_the_headroom_travels_on_the_item_and_through_a_warm_write() -> None:
    raised = restamped(image(rpm(20), State(), T0), rpm(40), T0)
    item = bucket_items.item_of(raised)
    # a clock like `v`: t*A + 20 units * P (refill 40 per 60 s), re-arms 0, 1 shard
    assert item["L"]["rpm"]["hr"] == [T0 * 40 * MILLI + 20 * MILLI * 60_000, 0, 1]
    assert parse_wire(codec.encode_item(item)) == raised
    # a warm write's answer leaves it out of the states it decodes: the planned image's stays
    after = debited(raised, MILLI, T0)
    wire = codec.encode_item(bucket_items.item_of(after))
    del wire["L"]["M"]["rpm"]["M"]["hr"]
    assert parse_updated(wire, raised).states["rpm"].headroom == raised.states["rpm"].headroom
    # an item written before the headroom (or never raised) reads as none
    assert parse_wire(wire).states["rpm"].headroom is None


# --- properties ----------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("debit"), st.integers(1, 30)),
        st.tuples(st.just("wait"), st.integers(1, 90_000)),
        st.tuples(st.just("limits"), st.integers(1, 80)),
    ),
    max_size=25,
)


def _replay(ops: list[tuple[str, int]], check: object) -> None:
    """Run `ops` on an rpm bucket (20 at first), calling `check(image, now, debited, restamps)`
    after each: `debited` the debits (milli) since the bucket last read full, `restamps` the
    restamps since."""
    now = T0
    item = image(rpm(20), State(), now)
    debits = restamps = 0
    for op, n in ops:
        if op == "debit":
            item = debited(item, n * MILLI, now)
            debits += n * MILLI
        elif op == "wait":
            now += n
        else:
            item = restamped(item, rpm(n), now)
            restamps += 1
        p = item.stamp.limits[0]
        if bucket.view(p, item.states["rpm"], now, WHOLE).balance == p.shard_capacity(WHOLE):
            debits = restamps = 0
        check(item, now, debits, restamps)  # type: ignore[operator]


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_use_never_exceeds_what_was_debited_since_the_bucket_was_full(
    ops: list[tuple[str, int]],
) -> None:
    """Whatever the raises, lowers, waits and debits, use is at most the debits since the bucket
    last read full (plus a milli-unit of rounding per restamp)."""

    def check(item: BucketImage, now: int, debits: int, restamps: int) -> None:
        p, state = item.stamp.limits[0], item.states["rpm"]
        assert 0 <= headroom.use(p, state, now, WHOLE, 0) <= debits + restamps

    _replay(ops, check)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, raise_to=st.integers(21, 100), waits=st.lists(st.integers(0, 90_000)))
def test_a_raise_followed_by_no_debits_adds_no_use(
    ops: list[tuple[str, int]], raise_to: int, waits: list[int]
) -> None:
    """Use after a raise, and while only refill follows, is never above use before it (plus
    a milli-unit of rounding); on a bucket full at the raise it stays 0."""
    seen: list[tuple[BucketImage, int]] = []
    _replay(ops, lambda item, now, *_: seen.append((item, now)))
    item, now = seen[-1] if seen else (image(rpm(20), State(), T0), T0)
    p = item.stamp.limits[0]
    before = headroom.use(p, item.states["rpm"], now, WHOLE, 0)
    full = bucket.view(p, item.states["rpm"], now, WHOLE).balance == p.shard_capacity(WHOLE)
    if raise_to * MILLI <= p.shard_capacity(WHOLE):
        return
    raised = restamped(item, rpm(raise_to), now)
    q = raised.stamp.limits[0]
    for wait in [0, *waits]:
        now += wait
        used = headroom.use(q, raised.states["rpm"], now, WHOLE, 0)
        assert used <= before + 1 and (used == 0 or not full)


@settings(max_examples=200, deadline=None)
@given(
    v=st.integers(0, 10**12),
    w=st.none() | st.integers(0, 10**13),
    tu=st.integers(0, 10**6),
    now=st.integers(0, 10**13),
    quota=st.booleans(),
    amount=st.integers(0, 10**12),
)
def test_with_no_live_raise_use_is_capacity_less_balance(
    v: int, w: int | None, tu: int, now: int, quota: bool, amount: int
) -> None:
    """Byte-identical to before: no headroom, or one a top-up, reset or split ended."""
    p = weekly(100) if quota else rpm(20)
    for state, rearms, slot in (
        (State(v=v, w=w, tu=tu), 0, WHOLE),
        (State(v=v, w=w, tu=tu, headroom=Headroom(amount, 0, 1, w)), 1, WHOLE),
        (State(v=v, w=w, tu=tu, headroom=Headroom(amount, 0, 1, w)), 0, bucket.Slot(0, 2)),
    ):
        expected = p.shard_capacity(slot) - bucket.view(p, state, now, slot).balance
        assert headroom.use(p, state, now, slot, rearms) == expected
