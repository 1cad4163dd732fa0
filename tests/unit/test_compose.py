"""Property tests of write composition (core/compose.py): one write equals two in sequence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zae_limiter.core import bucket, compose
from zae_limiter.core.bucket import MILLI, Guard, Kind, LimitWrite, Params, State

Stored = dict[str, int | None]  # v, w, tu as DynamoDB holds them (None: absent)


def apply(write: LimitWrite, stored: Stored) -> Stored | None:
    """What DynamoDB does with one limit's part of an UpdateItem: None if a guard fails."""
    if not all(compose.holds(g, stored[g.attr]) for g in write.guards):
        return None
    out = dict(stored)
    if write.set_v is not None:
        out["v"] = write.set_v
    elif write.add_v:
        out["v"] = (out["v"] or 0) + write.add_v
    if write.set_w is not None:
        out["w"] = write.set_w
    if write.set_tu is not None:
        out["tu"] = write.set_tu
    elif write.add_tu:
        out["tu"] = (out["tu"] or 0) + write.add_tu
    return out


values = st.integers(-50, 50)
guards = st.builds(
    Guard,
    attr=st.sampled_from(["v", "w", "tu"]),
    op=st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
    value=values,
    or_absent=st.booleans(),
)


@st.composite
def writes(draw: st.DrawFn) -> LimitWrite:
    set_v = draw(st.none() | values)
    return LimitWrite(
        guards=tuple(draw(st.lists(guards, max_size=4))),
        set_v=set_v,
        add_v=0 if set_v is not None else draw(values),
        set_w=draw(st.none() | values),
        set_tu=draw(st.none() | values),
        consumed=draw(values),
    )


stored_states = st.fixed_dictionaries({"v": values, "w": st.none() | values, "tu": values})


@settings(max_examples=500, deadline=None)
@given(first=writes(), second=writes(), stored=stored_states)
def test_one_composed_write_is_the_two_in_sequence(
    first: LimitWrite, second: LimitWrite, stored: Stored
) -> None:
    joined = compose.then(first, second)
    after_first = apply(first, stored)
    both = None if after_first is None else apply(second, after_first)
    if joined is None:
        assert both is None  # refused only when the sequence cannot succeed
        return
    assert apply(joined, stored) == both
    assert joined.consumed == first.consumed + second.consumed


@settings(max_examples=300, deadline=None)
@given(
    amounts=st.lists(st.integers(1, 50), min_size=2, max_size=40),
    debt=st.integers(-5_000, 5_000),
)
def test_a_batch_of_debits_keeps_one_pair_of_bounds(amounts: list[int], debt: int) -> None:
    """Debits planned one after another on projected state fold into a request of fixed size,
    and the batch is refused by the server exactly when its last debit would be."""
    params = Params("rpm", Kind.RATE, 1_000 * MILLI, 1_000 * MILLI, 60_000)
    now = 1_767_571_200_000
    state = State(v=now * params.refill + debt * params.period_ms)
    joined: LimitWrite | None = None
    projected = state
    stored: Stored | None = {"v": state.v, "w": None, "tu": None}
    for amount in amounts:
        write = bucket.plan_debit(
            params, projected, now, bucket.WHOLE, amount * MILLI, enforce=True, check=False
        )
        assert write is not None
        stored = None if stored is None else apply(write, stored)
        joined = write if joined is None else compose.then(joined, write)
        if joined is None:  # refused exactly when the debits one by one would be
            assert stored is None
            return
        projected = write.result
    assert joined is not None and stored is not None  # the sequence lands, and so does the batch
    assert len(joined.guards) <= 2
    assert joined.result == projected
