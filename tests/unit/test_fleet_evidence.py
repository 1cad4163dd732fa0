"""A fleet of writers on the in-memory bucket IO (docs/on-unavailable.md, "A fleet of writers").

Writers are simulated as other processes are: the same acquire path taking a new writer id
between writes (each id leaves its entry exactly as another process would). However many write
an item, and however they arrive (all at once, or spread over minutes), the item's evidence
stays under its bound; an entry removed to make room keeps every copy of its write out, and
its writer, deciding a lost answer, reports it undecided rather than guessing.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from support.acquire_env import AcquireEnv
from support.item_size import item_size
from support.memory_bucket_io import Fault
from unit.test_acquire_evidence import BIG, Interleaving, another_writer, interleaving_env
from zae_limiter.acquire.deadlines import Backoff
from zae_limiter.acquire.values import ItemChanged, Unavailable
from zae_limiter.core import bucket
from zae_limiter.core import evidence as rules
from zae_limiter.core.bucket import MILLI
from zae_limiter.core.hold_ledger import Ledger
from zae_limiter.core.images import BucketImage, new_writer_id
from zae_limiter.dynamo import codec, keys
from zae_limiter.dynamo.bucket_attributes import EVIDENCE

#: The most entries an item holds (core/evidence.py).
BOUND = rules.MAX_ENTRIES + rules.MAX_REMOVED
#: Bytes of evidence at most: each entry is an 8-character id and a 13-digit sequence (17
#: bytes in a map), plus the map's name and overhead and the floor.
EVIDENCE_BYTES = BOUND * 17 + 2 + 3 + 2 + 8


def evidence_bytes(item: dict[str, Any]) -> int:
    """Bytes of the item's evidence attributes by DynamoDB's item-size rules."""
    wanted: dict[str, Any] = {name: item[name] for name in ("ew", "ef") if name in item}
    return item_size(codec.encode_item(wanted))


def new_writer(env: AcquireEnv) -> None:
    """The same acquire path as a new process: a new writer id (and its holds ledger)."""
    lanes = env.admission.waves.lanes
    lanes.writer = new_writer_id()
    lanes.ledger = Ledger(lanes.writer, 0)


@pytest.mark.parametrize("seed", [25_000])
async def test_25000_writers_keep_every_item_under_the_bound(seed: int) -> None:
    """25,000 writers on one item, in bursts at one instant and spread over time (seed printed
    for replay); after every write the item holds at most the bound."""
    print(f"seed {seed}")
    rng = random.Random(seed)
    env = AcquireEnv(limits=(BIG,))
    image = env.stored()
    key = keys.bucket(*image.address)
    largest = 0
    current = image
    for _ in range(25_000):
        new_writer(env)
        if rng.random() < 0.3:
            env.clock.advance(rng.choice([1, 50, 500, 2_000, 30_000]))
        target = env.target(current, {"rpm": 1}, read_now=False)
        [landed] = await env.admission.debit([target], local_ok=False)
        current = landed.target.image  # the item as this write left it
        stored = env.bucket_io.items[(key["PK"], key["SK"])]
        if len(stored["ew"]) >= rules.MAX_ENTRIES:
            assert len(stored["ew"]) <= BOUND
            largest = max(largest, evidence_bytes(stored))
    assert largest <= EVIDENCE_BYTES < 1024
    assert env.state().consumed == 25_000 * MILLI  # every debit landed once


async def test_a_full_item_of_young_entries_is_written_without_evidence() -> None:
    env = AcquireEnv(limits=(BIG,))
    key = keys.bucket(*env.stored().address)
    for _ in range(rules.MAX_ENTRIES + 5):  # all at one instant
        new_writer(env)
        current = env.bucket_io.image(key)
        assert current is not None
        await env.admission.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)
    stored = env.bucket_io.image(key)
    assert stored is not None and len(stored.evidence) == rules.MAX_ENTRIES
    last = env.bucket_io.writes()[-1].evidence
    assert last is not None and not last.kept and stored.floor == 0
    # later, the oldest are past the eviction age: the next writer makes room (raising the
    # floor) and keeps its entry
    env.clock.advance(rules.EVICT_AGE_MS + 1_000)
    new_writer(env)
    await env.admission.debit([env.target(stored, {"rpm": 1}, read_now=False)], local_ok=False)
    after = env.bucket_io.image(key)
    assert after is not None
    assert env.admission.waves.lanes.writer in after.evidence
    assert len(after.evidence) == rules.MAX_ENTRIES - rules.ROOM_LEFT
    removed = rules.MAX_ENTRIES + 1 - len(after.evidence)
    assert after.floor == sorted(stored.evidence.values())[removed - 1]  # the newest removed
    assert env.state().consumed == (rules.MAX_ENTRIES + 6) * MILLI


async def test_a_write_without_evidence_is_never_sent_twice() -> None:
    """Its answer lost, it is undecided at once (it could land twice): counted, not re-sent."""
    env = AcquireEnv(limits=(BIG,))
    key = keys.bucket(*env.stored().address)  # with one entry: the item full after 39 more
    for _ in range(rules.MAX_ENTRIES - 1):
        new_writer(env)
        current = env.bucket_io.image(key)
        assert current is not None
        await env.admission.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)
    new_writer(env)
    env.bucket_io.inject(Fault.LOST_RESPONSE)  # landed, answer lost
    current = env.bucket_io.image(key)
    assert current is not None
    with pytest.raises(Unavailable):
        await env.admission.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)
    assert env.admission.waves.lanes.undecided == 1
    mine = [c for c in env.bucket_io.writes() if c.evidence and not c.evidence.kept]
    assert len(mine) == 1  # sent once
    assert env.state().consumed == rules.MAX_ENTRIES * MILLI  # it landed, and stays


async def test_an_entry_removed_to_make_room_keeps_its_write_out_and_is_undecided() -> None:
    """A write lands and its answer is lost; meanwhile 39 other writers fill the item and the
    oldest (it) is removed to make room, leaving room. Its re-send cannot land (the floor); the
    writer, finding no entry under a floor at its sequence, reports the write undecided."""
    env, bucket_io = interleaving_env()
    image = env.stored()
    others = [another_writer(env) for _ in range(rules.MAX_ENTRIES - 1)]
    # a debit first: the bucket is not full, so the lost write adds to it (commutes) and only
    # its evidence can refuse its re-send
    await others[0].debit([env.target(image, {"rpm": 1}, read_now=False)], local_ok=False)
    image = bucket_io.image(keys.bucket(*image.address)) or image

    async def others_write() -> None:
        env.clock.advance(rules.EVICT_AGE_MS + 1)
        for writer in others:
            current = bucket_io.image(keys.bucket(*image.address))
            assert current is not None
            await writer.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)

    bucket_io.between = others_write
    with pytest.raises(Exception, match="unknown"):
        await env.admission.debit([env.target(image, {"rpm": 7})], local_ok=False)
    lanes = env.admission.waves.lanes
    assert lanes.undecided == 1
    assert env.state().consumed == (8 + len(others)) * MILLI  # landed once: not re-applied
    stored = bucket_io.image(keys.bucket(*image.address))
    assert stored is not None and lanes.writer not in stored.evidence
    assert len(stored.evidence) < rules.MAX_ENTRIES  # room: the floor alone refused it
    assert bucket_io.lost_seq is not None and stored.floor >= bucket_io.lost_seq
    resend = [c for c in bucket_io.writes() if c.evidence and c.evidence.writer == lanes.writer]
    assert len(resend) == 2  # the lost write and one re-send, refused by the floor
    assert isinstance(bucket_io, Interleaving)


async def test_a_late_copy_of_a_removed_entrys_write_never_lands() -> None:
    """The write that set an entry, arriving again after the entry was removed to make room."""
    env = AcquireEnv(limits=(BIG,))
    key = keys.bucket(*env.stored().address)
    await env.admission.debit(
        [env.target(env.stored(), {"rpm": 1}, read_now=False)], local_ok=False
    )
    first = env.bucket_io.writes()[-1]
    assert first.evidence is not None and first.evidence.kept
    for _ in range(rules.MAX_ENTRIES - 2):  # the item full: the seed, the first, these
        new_writer(env)
        current = env.bucket_io.image(key)
        assert current is not None
        await env.admission.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)
    env.clock.advance(rules.EVICT_AGE_MS + 1_000)
    new_writer(env)  # makes room: the oldest entries go, the first's among them
    current = env.bucket_io.image(key)
    assert current is not None
    await env.admission.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)
    stored = env.bucket_io.image(key)
    assert stored is not None and first.evidence.writer not in stored.evidence
    assert len(stored.evidence) < rules.MAX_ENTRIES  # room: the floor alone refuses the copy
    consumed = env.state().consumed
    write = bucket.plan_debit(
        BIG, stored.states["rpm"], env.clock(), stored.slot, MILLI, enforce=True
    )
    assert write is not None
    with pytest.raises(ItemChanged):  # the copy, planned on an item without its entry
        await env.bucket_io.update(
            dataclasses.replace(stored, evidence={}),
            {"rpm": write},
            now=env.clock(),
            ttl=None,
            admissions=1,
            evidence=first.evidence,
        )
    assert env.state().consumed == consumed


def full_of_young_entries(env: AcquireEnv, resource: str) -> BucketImage:
    """An item whose evidence map is full of entries too young to remove: a new writer's write
    to it goes without evidence (never re-sent: a lost answer leaves it undecided)."""
    key = keys.bucket(*env.stored(resource=resource).address)
    young = {f"other{i:03d}": env.clock() for i in range(rules.MAX_ENTRIES)}
    env.bucket_io.items[(key["PK"], key["SK"])][EVIDENCE] = young
    image = env.bucket_io.image(key)
    assert image is not None
    return image


async def test_a_refusal_never_hides_an_undecided_write_of_the_same_call() -> None:
    """Found by the churn history (`soak.SMALL_CHURN`, seeds 203 and 303 under load): a call of
    several items, refused on one while its write to another stayed undecided (sent without
    evidence, answer lost, yet landed), was told "rate limited", which says nothing was
    debited; the debit stayed. The call is told that whether a debit landed is unknown."""
    env = AcquireEnv()
    free = full_of_young_entries(env, "a")
    full_looking = env.stored(resource="b")
    env.stored(resource="b", states=env.drained())  # drained since we saw it: refused
    env.bucket_io.inject(Fault.LOST_RESPONSE, item=keys.bucket(*free.address))
    targets = [
        env.target(free, {"rpm": 4}),
        env.target(full_looking, {"rpm": 1}, read_now=False),
    ]
    with pytest.raises(Unavailable) as raised:
        await env.admission.debit(targets, local_ok=False)
    assert raised.value.maybe_landed
    assert env.admission.waves.lanes.undecided == 1
    assert env.state("a").consumed == 4 * MILLI  # it landed and, undecided, stays (the docs)


async def test_a_certain_failure_never_hides_an_undecided_write_of_the_same_call() -> None:
    """One item's write certainly not applied (an outage), another's undecided: the call is
    told that whether a debit landed is unknown, not that nothing was debited (whichever of
    the two failed first)."""
    for undecided_first in (True, False):
        env = AcquireEnv(backoff=Backoff(scale=0.0))
        a, b = full_of_young_entries(env, "a"), full_of_young_entries(env, "b")
        lost, out = (a, b) if undecided_first else (b, a)
        env.bucket_io.inject(Fault.LOST_RESPONSE, item=keys.bucket(*lost.address))
        env.bucket_io.inject(Fault.OUTAGE, item=keys.bucket(*out.address))
        targets = [env.target(a, {"rpm": 4}), env.target(b, {"rpm": 1})]
        with pytest.raises(Unavailable) as raised:
            await env.admission.debit(targets, local_ok=False)
        assert raised.value.maybe_landed, undecided_first
        assert env.admission.waves.lanes.undecided == 1
