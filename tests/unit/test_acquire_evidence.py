"""Writer evidence and lanes on the in-memory bucket IO (docs/on-unavailable.md, "Exactly once").

The interleavings that broke the four-slot guard: a write lands, its answer is lost, and k other
writers write the item before the re-send (k up to 64); a write that did not land, found so only
after other writers moved the item, is fenced before its call is planned again; a late copy of
a fenced write cannot land; concurrent calls of one writer go out as one write.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from support.acquire_env import RPM, AcquireEnv
from support.memory_bucket_io import Fault, MemoryBucketIO
from zae_limiter.acquire import Admission
from zae_limiter.acquire.lanes import UNKNOWN_RESENDS
from zae_limiter.acquire.values import AnswerLost, ItemChanged
from zae_limiter.caches import ConfigCache, ImageCache
from zae_limiter.core.bucket import MILLI, Kind, Params
from zae_limiter.dynamo import keys
from zae_limiter.resolution import Resolver

BIG = Params("rpm", Kind.RATE, 1_000 * MILLI, 1_000 * MILLI, 60_000)


class Yielding(MemoryBucketIO):
    """Every update lets other tasks run while it is 'in flight' (and counts how many are)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.most_in_flight = 0
        self.updates = 0
        self.holds: dict[int, asyncio.Event] = {}  # update number (1-based) -> its release

    async def update(self, image: Any, writes: Any, **kwargs: Any) -> Any:
        self.in_flight += 1
        self.updates += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            held = self.holds.get(self.updates)
            if held is not None:
                await held.wait()
            await asyncio.sleep(0)
            return await super().update(image, writes, **kwargs)
        finally:
            self.in_flight -= 1


def yielding_env(limits: tuple[Params, ...]) -> AcquireEnv:
    env = AcquireEnv(limits=limits)
    env.bucket_io = Yielding()
    env.admission = Admission(env.bucket_io, "ns1", _resolver(env), env.images, env.clock, 7)
    return env


def _resolver(env: AcquireEnv) -> Resolver:
    return Resolver(cast(Any, None), ConfigCache(60), env.clock)


class Interleaving(MemoryBucketIO):
    """A double that runs `between()` after the next write lands and before its answer is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.between: Any = None
        self.lost_seq: int | None = None

    async def update(self, image: Any, writes: Any, **kwargs: Any) -> Any:
        between, self.between = self.between, None
        if between is None:
            return await super().update(image, writes, **kwargs)
        await super().update(image, writes, **kwargs)  # landed
        self.lost_seq = kwargs["evidence"].seq
        await between()
        raise AnswerLost(TimeoutError("answer lost"))


def another_writer(env: AcquireEnv) -> Admission:
    """A second process: its own writer id, caches and lanes, on the same items."""
    images = ImageCache(rejection_ttl_seconds=1.0, size=1_000)
    return Admission(env.bucket_io, "ns1", _resolver(env), images, env.clock, 7)


def interleaving_env() -> tuple[AcquireEnv, Interleaving]:
    env = AcquireEnv(limits=(BIG,))
    bucket_io = Interleaving()
    env.bucket_io = bucket_io
    env.admission = Admission(bucket_io, "ns1", _resolver(env), env.images, env.clock, 7)
    return env, bucket_io


@pytest.mark.parametrize("others", [0, 1, 3, 4, 5, 16, 64])
async def test_a_lost_write_is_found_after_k_other_writes(others: int) -> None:
    env, bucket_io = interleaving_env()
    image = env.stored()
    writers = [another_writer(env) for _ in range(others)]

    async def others_write() -> None:
        for writer in writers:
            current = bucket_io.image(keys.bucket(*image.address))
            assert current is not None
            await writer.debit([env.target(current, {"rpm": 1}, read_now=False)], local_ok=False)

    bucket_io.between = others_write
    landed = await env.admission.debit([env.target(image, {"rpm": 7})], local_ok=False)
    assert landed[0].debited == {"rpm": 7 * MILLI}
    assert env.state().consumed == (7 + others) * MILLI  # ours once, theirs once each
    updates = [c for c in bucket_io.writes() if c.operation == "update"]
    writer = env.admission.waves.lanes.writer
    mine = [c for c in updates if c.evidence and c.evidence.writer == writer]
    assert len(mine) == 2  # the lost write and its one re-send, decided from the item it returned
    assert not [c for c in bucket_io.writes() if c.operation == "fence"]


async def test_a_write_that_did_not_land_is_fenced_before_it_is_planned_again() -> None:
    """Timeout (not applied), then another writer moves the item: the re-send fails its limit
    guard; the item shows our entry below the write's sequence, so the writer fences it and
    plans the call again on the item; exactly one debit lands."""
    env = AcquireEnv(limits=(RPM,))
    image = env.stored()
    other = another_writer(env)
    env.bucket_io.inject(Fault.TIMEOUT)
    # the other process drains all but 2 before our re-send
    drained = env.target(image, {"rpm": 8}, read_now=False)
    call = asyncio.ensure_future(
        env.admission.debit([env.target(image, {"rpm": 3}, read_now=False)], local_ok=False)
    )
    await asyncio.sleep(0)
    await other.debit([drained], local_ok=False)
    with pytest.raises(Exception) as raised:
        await call
    assert "Rate limit exceeded" in str(raised.value)
    operations = [c.operation for c in env.bucket_io.writes()]
    assert "fence" in operations
    assert env.state().consumed == 8 * MILLI  # only the other process's debit


async def test_a_late_copy_of_a_fenced_write_never_lands() -> None:
    env = AcquireEnv(limits=(BIG,))
    image = env.stored()
    lanes = env.admission.waves.lanes
    writer = lanes.writer
    target = env.target(image, {"rpm": 5}, read_now=False)
    env.bucket_io.inject(Fault.TIMEOUT)
    env.bucket_io.inject(Fault.CONDITION_FAILED)
    await env.admission.debit([target], local_ok=False)
    fence = next(c for c in env.bucket_io.writes() if c.operation == "fence")
    assert fence.evidence is not None and fence.evidence.writer == writer
    first = env.bucket_io.writes()[0]
    assert first.evidence is not None
    # the copy of the first write, arriving now, is refused by its own evidence condition
    from zae_limiter.core import bucket

    write = bucket.plan_debit(
        BIG, image.states["rpm"], env.clock(), image.slot, 5 * MILLI, enforce=True
    )
    assert write is not None
    stored = env.bucket_io.image(keys.bucket(*image.address))
    assert stored is not None
    with pytest.raises(ItemChanged):
        await env.bucket_io.update(
            stored,
            {"rpm": write},
            now=env.clock(),
            ttl=None,
            admissions=1,
            evidence=first.evidence,
        )
    assert env.state().consumed == 5 * MILLI


async def test_concurrent_calls_of_one_writer_go_out_as_one_write_each_round() -> None:
    env = yielding_env((BIG,))
    image = env.stored()
    calls = [
        env.admission.debit([env.target(image, {"rpm": 1}, read_now=False)], local_ok=False)
        for _ in range(40)
    ]
    landed = await asyncio.gather(*calls)
    assert len(landed) == 40
    assert env.state().consumed == 40 * MILLI
    assert (
        len(env.bucket_io.writes()) == 2
    )  # the first call alone, then the 39 that queued behind it


async def test_a_call_that_does_not_fit_beside_the_others_waits_and_is_refused_alone() -> None:
    env = yielding_env((RPM,))  # 10 per minute
    image = env.stored()
    amounts = [4, 4, 4, 1]
    results = await asyncio.gather(
        *(
            env.admission.debit([env.target(image, {"rpm": a}, read_now=True)], local_ok=False)
            for a in amounts
        ),
        return_exceptions=True,
    )
    admitted = [
        a for a, r in zip(amounts, results, strict=True) if not isinstance(r, BaseException)
    ]
    assert sum(admitted) <= 10
    assert env.state().consumed == sum(admitted) * MILLI
    assert sorted(admitted) == [1, 4, 4]


async def test_every_resend_lost_is_decided_by_the_writer_s_entry_and_debits_once() -> None:
    env = AcquireEnv(limits=(BIG,))
    image = env.stored()
    env.bucket_io.inject(Fault.LOST_RESPONSE)  # landed, answer lost
    for _ in range(UNKNOWN_RESENDS):
        env.bucket_io.inject(Fault.TIMEOUT)  # every re-send's answer lost too
    with pytest.raises(AnswerLost):  # the caller is told; the outcome is decided off its path
        await env.admission.debit([env.target(image, {"rpm": 2})], local_ok=False)
    await env.admission.pending.drain(None)
    lanes = env.admission.waves.lanes
    assert (lanes.undecided, lanes.resolved_by_read) == (0, 1)  # read: it had landed
    assert env.state().consumed == 0  # landed once (no re-send could), then refunded once
    assert env.admission.pending.refunded_after_deadline == 1


async def test_a_cancelled_caller_never_lets_a_second_write_go_out_beside_its_batch() -> None:
    """A caller whose retry leads a batch with others' calls is cancelled while it is in flight:
    the batch still ends for the others, and a call arriving meanwhile is sent only after it
    (never two writes of one writer in flight on one item)."""
    env = yielding_env((BIG,))
    bucket_io = env.bucket_io
    assert isinstance(bucket_io, Yielding)
    image = env.stored()
    env.bucket_io.inject(Fault.CONDITION_FAILED)  # the first write fails: its retry leads a batch

    def debit() -> asyncio.Future[Any]:
        target = env.target(image, {"rpm": 1}, read_now=False)
        return asyncio.ensure_future(env.admission.debit([target], local_ok=False))

    first, retry = asyncio.Event(), asyncio.Event()
    bucket_io.holds = {1: first, 2: retry}
    leader = debit()
    while bucket_io.updates < 1:
        await asyncio.sleep(0)  # the leader's first write is in flight (and will fail)
    others = [debit() for _ in range(3)]
    for _ in range(10):
        await asyncio.sleep(0)  # the others queue behind it
    first.set()
    while bucket_io.updates < 2:
        await asyncio.sleep(0)  # the leader's retry now carries the others too
    leader.cancel()
    late = debit()
    for _ in range(10):
        await asyncio.sleep(0)  # the late call would go out now if the lane were free
    retry.set()
    await asyncio.wait_for(asyncio.gather(*others, late), 10)  # a stranded call fails, not hangs
    assert bucket_io.most_in_flight == 1
    assert env.state().consumed >= 4 * MILLI  # the three others and the late call landed
