"""Exact shard arithmetic (core.shares, core.shard_split): nothing minted, nothing stranded.

The property at the end drives one bucket of three limits (a large dripping limit, a dripping
limit smaller than the shard count, a daily quota) through random debits, top-ups, resets,
splits (some raced by debits that land between the split's read and its transaction), clock
moves and expiries, on the pure core, and checks after every step that the
entity-wide total admitted never exceeds what the limits allow and that the balance reported
(summed exactly over shards, rounded once) is the exact balance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from zae_limiter.core import bucket, operations, shares
from zae_limiter.core.bucket import MILLI, Guard, Kind, LimitWrite, Params, Slot, State
from zae_limiter.core.shard_split import siblings, split_limit

T0 = 1_767_571_200_000 + 3_600_000  # 2026-01-05 01:00 UTC: a daily quota period is open
DAY = 86_400_000
counts = st.sampled_from([1, 2, 4, 8, 16, 32])


def holds(guard: Guard, state: State) -> bool:
    value = getattr(state, guard.attr)
    if value is None:
        return guard.or_absent
    ops = {"=": value == guard.value, "<>": value != guard.value, "<": value < guard.value}
    ops.update({"<=": value <= guard.value, ">": value > guard.value, ">=": value >= guard.value})
    return bool(ops[guard.op])


def land(write: LimitWrite | None, state: State) -> State:
    """The stored state after the write (its guards must hold: one writer here)."""
    if write is None:
        return state
    assert all(holds(g, state) for g in write.guards), (write, state)
    return State(
        v=write.set_v if write.set_v is not None else state.v + write.add_v,
        w=write.set_w if write.set_w is not None else state.w,
        tu=write.set_tu if write.set_tu is not None else state.tu + write.add_tu,
        consumed=state.consumed + write.consumed,
        overdrawn=state.overdrawn + write.overdrawn,
    )


# --- shares ------------------------------------------------------------------------------------


@given(units=st.integers(0, 10**7), extra=st.integers(0, 999), count=counts)
def test_shares_sum_to_the_whole_in_whole_units(units: int, extra: int, count: int) -> None:
    total = units * MILLI + extra
    parts = [shares.share(total, slot) for slot in Slot(0, count).all()]
    assert sum(parts) == total
    assert all(part % MILLI == 0 for part in parts[1:])  # only shard 0 keeps a fraction
    assert sum(1 for part in parts if part >= MILLI) == min(count, units)


@given(capacity=st.integers(1, 10**7), refill=st.integers(0, 10**9), count=counts)
def test_refill_shares_sum_to_the_whole_and_go_only_where_capacity_is(
    capacity: int, refill: int, count: int
) -> None:
    cap = capacity * MILLI
    slots = Slot(0, count).all()
    rates = [shares.refill_share(cap, refill, slot) for slot in slots]
    assert sum(rates) == refill
    for slot, rate in zip(slots, rates, strict=True):
        if shares.share(cap, slot) == 0:
            assert rate == 0


@given(capacity=st.integers(0, 10**6), refill=st.integers(0, 10**9), count=counts)
def test_the_two_halves_of_a_split_sum_to_the_shard_they_came_from(
    capacity: int, refill: int, count: int
) -> None:
    cap = capacity * MILLI
    for slot in Slot(0, count).all():
        a, b = siblings(slot)
        assert shares.share(cap, a) + shares.share(cap, b) == shares.share(cap, slot)
        assert shares.refill_share(cap, refill, a) + shares.refill_share(
            cap, refill, b
        ) == shares.refill_share(cap, refill, slot)


def test_a_limit_smaller_than_the_shard_count_lives_on_as_many_shards_as_it_has_units() -> None:
    small = Params("small", Kind.RATE, 10 * MILLI, 10 * MILLI, 1_000)
    slots = Slot(0, 32).all()
    caps = [small.shard_capacity(s) for s in slots]
    assert sorted(caps, reverse=True) == [MILLI] * 10 + [0] * 22
    assert sum(small.shard_refill(s) for s in slots) == 10 * MILLI
    jobs = Params("jobs", Kind.CALENDAR, 10 * MILLI, 0, 60_000, cron="0 0 * * *|UTC")
    assert sum(jobs.shard_capacity(s) for s in slots) == 10 * MILLI


# --- splits ------------------------------------------------------------------------------------


def total_exact(p: Params, states: list[State], now: int, count: int) -> Fraction:
    slots = Slot(0, count).all()
    return sum(
        (bucket.exact_balance(p, s, now, slot) for s, slot in zip(states, slots, strict=True)),
        Fraction(0),
    )


def split_all(p: Params, states: list[State], now: int) -> list[State]:
    count = len(states)
    kept, given_ = [], []
    for slot, state in zip(Slot(0, count).all(), states, strict=True):
        write, sibling = split_limit(p, state, now, slot)
        kept.append(land(write, state))
        given_.append(sibling)
    return kept + given_


@settings(max_examples=100, deadline=None)
@given(
    capacity=st.integers(1, 5_000),
    refill=st.integers(1, 5_000),
    kind=st.sampled_from([Kind.RATE, Kind.CALENDAR]),
    spent=st.lists(st.integers(0, 50), min_size=1, max_size=6),
    topped=st.integers(0, 40),
)
def test_a_split_moves_balance_exactly_and_strands_no_whole_unit(
    capacity: int, refill: int, kind: Kind, spent: list[int], topped: int
) -> None:
    p = Params("x", kind, capacity * MILLI, refill * MILLI if kind == Kind.RATE else 0, 60_000)
    if kind == Kind.CALENDAR:
        p = Params("x", kind, capacity * MILLI, 0, 60_000, cron="0 0 * * *|UTC")
    states = [bucket.full_state(p, bucket.WHOLE)]
    now = T0
    for amount in spent:
        count = len(states)
        for slot in Slot(0, count).all():
            write = bucket.plan_debit(
                p, states[slot.index], now, slot, amount * MILLI, enforce=True
            )
            if write is not None:
                states[slot.index] = land(write, states[slot.index])
        if kind == Kind.CALENDAR and topped:
            slots = Slot(0, count).all()
            for slot, part in zip(slots, operations.spread(topped * MILLI, slots), strict=True):
                write, _ = operations.plan_top_up(p, states[slot.index], now, slot, part)
                states[slot.index] = land(write, states[slot.index])
        before = total_exact(p, states, now, count)
        if count < 32:
            states = split_all(p, states, now)
            assert total_exact(p, states, now, len(states)) == before
        for slot in Slot(0, len(states)).all():
            current = bucket.view(p, states[slot.index], now, slot)
            assert current.balance <= current.ceiling
        now += 7
    if kind == Kind.CALENDAR:  # every whole unit is admittable one at a time, on some shard
        left = total_exact(p, states, now, len(states))
        admitted = drain(p, states, now)
        assert admitted == math.floor(left / MILLI)


def drain(p: Params, states: list[State], now: int) -> int:
    admitted = 0
    for slot in Slot(0, len(states)).all():
        while True:
            write = bucket.plan_debit(p, states[slot.index], now, slot, MILLI, enforce=True)
            if write is None:
                break
            states[slot.index] = land(write, states[slot.index])
            admitted += 1
    return admitted


# --- the property ------------------------------------------------------------------------------

RPS = Params("rps", Kind.RATE, 2_000 * MILLI, 1_000 * MILLI, 1_000)
SMALL = Params("small", Kind.RATE, 10 * MILLI, 10 * MILLI, 1_000)
JOBS = Params("jobs", Kind.CALENDAR, 10 * MILLI, 0, 60_000, cron="0 0 * * *|UTC")
LIMITS = (RPS, SMALL, JOBS)


@dataclass
class Bucket:
    """One bucket's shards, as the pure core sees them, with the entity-wide ledger."""

    now: int = T0
    states: list[dict[str, State]] = field(
        default_factory=lambda: [{p.name: bucket.full_state(p, bucket.WHOLE) for p in LIMITS}]
    )
    admitted: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("rps", "small", "jobs"), 0)
    )
    granted: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("rps", "small", "jobs"), 0)
    )

    @property
    def slots(self) -> list[Slot]:
        return Slot(0, len(self.states)).all()

    def debit(self, amounts: dict[str, int], order: list[int]) -> None:
        """Admit on the first shard (in `order`) where every amount fits: the acquire's choice."""
        for index in order:
            slot = self.slots[index % len(self.states)]
            writes = {}
            for name, units in amounts.items():
                p = next(q for q in LIMITS if q.name == name)
                state = self.states[slot.index][name]
                write = bucket.plan_debit(p, state, self.now, slot, units * MILLI, enforce=True)
                if write is None:
                    break
                writes[name] = write
            else:
                for name, write in writes.items():
                    self.states[slot.index][name] = land(write, self.states[slot.index][name])
                    self.admitted[name] += amounts[name] * MILLI
                return

    def top_up(self, units: int) -> None:
        parts = operations.spread(units * MILLI, self.slots)
        for slot, part in zip(self.slots, parts, strict=True):
            write, gained = operations.plan_top_up(
                JOBS, self.states[slot.index]["jobs"], self.now, slot, part
            )
            self.states[slot.index]["jobs"] = land(write, self.states[slot.index]["jobs"])
            self.granted["jobs"] += gained
        rooms = [
            operations.room(SMALL, s["small"], self.now, slot)
            for s, slot in zip(self.states, self.slots, strict=True)
        ]
        for slot, part in zip(self.slots, operations.allocate(rooms, units * MILLI), strict=True):
            if part:
                write, gained = operations.plan_top_up(
                    SMALL, self.states[slot.index]["small"], self.now, slot, part
                )
                self.states[slot.index]["small"] = land(write, self.states[slot.index]["small"])
                self.granted["small"] += gained

    def reset(self) -> None:
        for slot in self.slots:
            for p in LIMITS:
                write, gained = operations.plan_reset(
                    p, self.states[slot.index][p.name], self.now, slot
                )
                self.states[slot.index][p.name] = land(write, self.states[slot.index][p.name])
                self.granted[p.name] += gained

    def split(
        self, racing: Sequence[tuple[dict[str, int], list[int]]] = (), later: int = 0
    ) -> None:
        """Double the shards, planned on the states now; `racing` debits, dated `later` ms
        after, land on the old layout between that read and the split's transaction, which then
        lands only if every guard still holds (all or nothing), as on DynamoDB."""
        if len(self.states) == 32:
            return
        planned = []
        for slot, shard in zip(self.slots, self.states, strict=True):
            planned.append({p.name: split_limit(p, shard[p.name], self.now, slot) for p in LIMITS})
        self.now += later
        for amounts, order in racing:
            self.debit(amounts, [*order, *range(32)])
        if not all(
            holds(guard, shard[name])
            for shard, writes in zip(self.states, planned, strict=True)
            for name, (write, _) in writes.items()
            for guard in write.guards
        ):
            return  # the transaction is cancelled: the bucket keeps its layout
        kept = [
            {name: land(write, shard[name]) for name, (write, _) in writes.items()}
            for shard, writes in zip(self.states, planned, strict=True)
        ]
        self.states = kept + [
            {name: sibling for name, (_, sibling) in writes.items()} for writes in planned
        ]

    def expire(self) -> None:
        """An unsplit item past its TTL (every limit full, no period left open) reads as absent
        and is created again at its full allowance; a split bucket's items never expire."""
        if len(self.states) > 1:
            return
        fresh = {p.name: bucket.full_state(p, bucket.WHOLE) for p in LIMITS}
        if all(
            bucket.exact_balance(p, self.states[0][p.name], self.now, bucket.WHOLE)
            == bucket.exact_balance(p, fresh[p.name], self.now, bucket.WHOLE)
            for p in LIMITS
        ):
            self.states = [fresh]

    def reported(self, p: Params) -> int:
        """What check_availability reports: shard balances summed exactly, rounded once."""
        exact = sum(
            (
                bucket.exact_balance(p, s[p.name], self.now, slot)
                for s, slot in zip(self.states, self.slots, strict=True)
            ),
            Fraction(0),
        )
        return math.floor(exact / MILLI)


amounts = st.dictionaries(st.sampled_from(["rps", "small", "jobs"]), st.integers(1, 3), min_size=1)
orders = st.lists(st.integers(0, 31), min_size=32, max_size=32)  # the shards a debit tries first
steps = st.one_of(
    st.tuples(st.just("debit"), amounts, orders),
    st.tuples(st.just("top_up"), st.integers(1, 5)),
    st.tuples(st.just("reset")),
    st.tuples(st.just("split")),
    st.tuples(
        st.just("split"),
        st.lists(st.tuples(amounts, orders), min_size=1, max_size=6),
        st.integers(0, 1_500),
    ),
    st.tuples(st.just("clock"), st.integers(0, 3_000)),
    st.tuples(st.just("expire")),
)


@settings(max_examples=60, deadline=None)
@given(run=st.lists(steps, max_size=60))
def test_random_sequences_never_admit_more_than_allowed_and_report_exactly(
    run: list[tuple[object, ...]],
) -> None:
    b = Bucket()
    for step in run:
        kind = step[0]
        if kind == "debit":
            b.debit(step[1], [*step[2], *range(32)])  # type: ignore[arg-type, misc]
        elif kind == "top_up":
            b.top_up(step[1])  # type: ignore[arg-type]
        elif kind == "clock":
            b.now += step[1]  # type: ignore[operator]
        elif kind == "split" and len(step) > 1:  # debits land between its read and its write
            b.split(step[1], step[2])  # type: ignore[arg-type]
        else:
            getattr(b, str(kind))()
        elapsed = b.now - T0  # the run stays inside one daily quota period
        for p in (RPS, SMALL):
            allowed = p.capacity + p.refill * elapsed // p.period_ms + b.granted[p.name]
            assert b.admitted[p.name] <= allowed, p.name
        assert b.admitted["jobs"] <= JOBS.capacity + b.granted["jobs"]
        # a quota's balance is exactly its allowance plus top-ups minus what was admitted
        exact = JOBS.capacity + b.granted["jobs"] - b.admitted["jobs"]
        assert b.reported(JOBS) == exact // MILLI
        for p in (RPS, SMALL):  # never above the entity-wide ceiling
            assert b.reported(p) <= p.capacity // MILLI
    # and every unit of the quota left is admittable, one at a time
    left = b.reported(JOBS)
    taken = 0
    while True:
        before = b.admitted["jobs"]
        b.debit({"jobs": 1}, list(range(32)))
        if b.admitted["jobs"] == before:
            break
        taken += 1
    assert taken == left
