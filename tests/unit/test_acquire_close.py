"""What `close()` tells the calls of a write it cuts (docs/on-unavailable.md, "What close()
leaves"), on the in-memory bucket IO: once a write was sent it may have applied, so its calls
are told the outcome is unknown (`AnswerLost`), never that nothing was debited."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from support.acquire_env import AcquireEnv
from support.memory_bucket_io import MemoryBucketIO
from zae_limiter.acquire import Admission
from zae_limiter.acquire.pending import Pending
from zae_limiter.acquire.values import AnswerLost, Unavailable
from zae_limiter.closing import close_writers


class AnswersNothingAfterTheFirst(MemoryBucketIO):
    """The first update answers after a few loop turns (others queue behind it); every later
    one applies and then never answers (the table's answer is what close() cuts)."""

    def __init__(self) -> None:
        super().__init__()
        self.updates = 0

    async def update(self, image: Any, writes: Any, **kwargs: Any) -> Any:
        self.updates += 1
        if self.updates == 1:
            for _ in range(5):
                await asyncio.sleep(0)
            return await super().update(image, writes, **kwargs)
        await super().update(image, writes, **kwargs)  # applied
        await asyncio.Event().wait()  # its answer never comes


async def test_calls_of_a_write_cut_by_close_after_it_was_sent_are_told_it_may_have_applied() -> (
    None
):
    env = AcquireEnv()
    io = AnswersNothingAfterTheFirst()
    env.bucket_io = io
    env.admission = Admission(io, "ns1", env.admission.finder.resolver, env.images, env.clock, 7)
    image = env.stored()
    first = asyncio.ensure_future(
        env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    )
    await asyncio.sleep(0)
    queued = [
        asyncio.ensure_future(env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False))
        for _ in range(2)
    ]
    await first
    while io.updates < 2:  # the two queued calls went out together, and applied
        await asyncio.sleep(0)
    lanes = env.admission.waves.lanes
    for task in lanes.close():
        task.cancel()
    for call in queued:
        with pytest.raises(AnswerLost):
            await call
    assert env.state().consumed == 3_000  # both had landed: "nothing debited" would be wrong


async def test_close_ends_the_shared_reads_still_going() -> None:
    """A cold call's reads are shared, and outlive a caller that left (its deadline). `close()`
    ends them: they would go on trying a table nobody waits for (such a leftover read's retries
    were counted in a later test's requests). A caller still waiting is told unavailable."""
    env = AcquireEnv()
    finder = env.admission.finder
    reading = asyncio.Event()

    async def unanswered(*_: Any) -> Any:
        reading.set()
        await asyncio.Event().wait()

    finder._read_once = unanswered  # type: ignore[method-assign,assignment]
    left = asyncio.ensure_future(finder._read("u1", ("search",)))
    await reading.wait()
    left.cancel()
    with pytest.raises(asyncio.CancelledError):
        await left
    waiting = asyncio.ensure_future(finder._read("u2", ("search",)))
    await asyncio.sleep(0)
    reads = list(finder._reads.values())
    assert len(reads) == 2 and not any(r.done() for r in reads)  # the left one goes on
    await close_writers(Pending(), [env.admission], 1.0)
    with pytest.raises(Unavailable, match="closed"):
        await asyncio.wait_for(waiting, 5)  # (without the fix: waits for ever, a TimeoutError)
    assert all(r.cancelled() for r in reads)
