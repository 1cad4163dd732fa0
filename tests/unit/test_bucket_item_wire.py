"""Parsing a bucket item straight from DynamoDB's wire form (the warm path's ALL_NEW image)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from zae_limiter.core.bucket import MILLI, Kind, Params, State
from zae_limiter.core.holds import Hold
from zae_limiter.core.images import Stamp
from zae_limiter.dynamo import bucket_items as items
from zae_limiter.dynamo import bucket_wire, codec

LIMITS = (
    Params("rpm", Kind.RATE, 100 * MILLI, 100 * MILLI, 60_000),
    Params("weekly", Kind.CALENDAR, 50 * MILLI, 0, 60_000, soft=True, cron="0 0 * * 1|UTC"),
    Params("parallel", Kind.CONCURRENT, 8 * MILLI, 0, 30_000),
)
# a concurrency limit's entries (core.holds), read from the wire without generic decoding
entries = st.lists(
    st.builds(
        Hold,
        key=st.sampled_from(["w1.1", "w1.2", "w2.1", "a.b.7"]),
        amount=st.integers(-(10**6), 10**6),
        expiry=st.integers(0, 2 * 10**12),
    ),
    unique_by=lambda h: h.key,
    max_size=3,
).map(lambda hs: tuple(sorted(hs, key=lambda h: h.key)))
states = st.builds(
    State,
    v=st.integers(-(10**30), 10**30),
    w=st.one_of(st.none(), st.integers(0, 2 * 10**12)),
    tu=st.integers(0, 10**6),
    consumed=st.integers(-(10**9), 10**9),
    overdrawn=st.integers(0, 100),
    holds=entries,
)


@settings(max_examples=100, deadline=None)
@given(
    limits=st.sampled_from([LIMITS[:1], LIMITS[:2], LIMITS]),
    state=states,
    parent=st.sampled_from([None, "org-1"]),
    shards=st.sampled_from([1, 4]),
    ttl=st.one_of(st.none(), st.integers(1, 2 * 10**9)),
    evidence=st.dictionaries(
        st.text("abcXYZ019-_", min_size=8, max_size=8), st.integers(1, 10**13)
    ),
    writes=st.integers(0, 10**6),
)
def test_parse_wire_is_parse_of_the_decoded_item(
    limits: tuple[Params, ...],
    state: State,
    parent: str | None,
    shards: int,
    ttl: int | None,
    evidence: dict[str, int],
    writes: int,
) -> None:
    stamp = Stamp(limits, parent=parent, cascade=parent is not None, shards=shards)
    item = items.full_item(
        "ns1",
        "user-1",
        "api",
        shards - 1,
        stamp,
        7,
        {p.name: state for p in limits},
        admissions=3,
        generation="g1",
        now=1_800_000_000_000,
        ttl=ttl,
        evidence=evidence,
        writes=writes,
    )
    wire = codec.encode_item(item)
    image = items.parse(item)
    assert bucket_wire.parse_wire(wire) == image
    # what an update returns, read with the image it was planned on (before the write)
    planned = replace(image, states={p.name: State() for p in limits}, evidence={}, writes=0)
    assert bucket_wire.parse_updated(wire, planned) == image
    assert bucket_wire.parse_updated(wire, planned).stamp is planned.stamp
    # planned on another stamp sequence: read whole
    other = replace(planned, stamp_seq=8, stamp=replace(stamp, shards=shards * 2))
    assert bucket_wire.parse_updated(wire, other) == image


def test_numbers_decode_as_ints_and_anything_else_as_floats() -> None:
    assert codec.decode({"N": "1796124948811000000060000000"}) == 1796124948811000000060000000
    assert codec.decode({"N": "-12"}) == -12
    assert codec.decode({"N": "1.5"}) == 1.5
    assert codec.decode({"N": "1E3"}) == 1000.0
    assert isinstance(codec.decode({"N": "1E3"}), float)
