"""Cancelled callers on DynamoDB Local (docs/on-unavailable.md): a caller that leaves never strands
the calls folded into the same write, and never leaves money behind once `close()` drained.

The ledger is what the callers saw: a lease whose block body completed owes its amount (and its
adjustment); every other call owes nothing. The item's consumption must equal it exactly.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from zae_limiter import Limit, RateLimiter, Repository

BIG = 10_000_000


async def consumed(limiter: RateLimiter) -> int:
    return BIG - (await limiter.available("u1", "api"))["rpm"]


async def test_a_cancelled_caller_does_not_strand_the_calls_sharing_its_write(
    limiter: RateLimiter, open_repo: Any
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", BIG)])
    mine: Repository = await open_repo()
    other = RateLimiter(mine)
    async with other.acquire("u1", "api", {"rpm": 1}, timeout=None):
        pass  # warm: every later call is folded into one lane
    owed = 1
    done = {"bodies": 0}

    async def one() -> None:
        async with other.acquire("u1", "api", {"rpm": 1}, timeout=None):
            done["bodies"] += 1

    for _ in range(5):
        tasks = [asyncio.ensure_future(one()) for _ in range(8)]
        loop = asyncio.get_running_loop()
        for task in tasks[:2]:
            loop.call_later(0.003, task.cancel)
        finished, stuck = await asyncio.wait(tasks[2:], timeout=30)  # a hang guard, not a timing
        assert not stuck, f"{len(stuck)} calls that were not cancelled never returned"
        for task in finished:
            task.result()
        await asyncio.gather(*tasks[:2], return_exceptions=True)
    owed += done["bodies"]
    await mine.close()  # drains what the cancelled callers left
    assert mine.get_cache_stats().abandoned_at_close == 0
    assert await consumed(limiter) == owed


async def test_a_thousand_randomly_cancelled_acquires_leave_exactly_the_ledger(
    limiter: RateLimiter, open_repo: Any
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", BIG)])
    mine: Repository = await open_repo()
    other = RateLimiter(mine)
    rng = random.Random(29)
    ledger = {"owed": 0, "returned": 0, "cancelled": 0}
    per_worker = 50

    async def body(adjust: bool, pause: float) -> None:
        async with other.acquire("u1", "api", {"rpm": 1}, timeout=None) as lease:
            await asyncio.sleep(pause)
            if adjust:
                await lease.adjust(rpm=1)
            ledger["owed"] += 2 if adjust else 1  # no await after this: the body completed

    async def worker(seed: int) -> None:
        mine_rng = random.Random(seed)
        for i in range(per_worker):
            adjust = i % 2 == 0
            moment = mine_rng.uniform(0, 0.03)
            pause = mine_rng.uniform(0, 0.01)
            try:
                if mine_rng.random() < 0.5:
                    await asyncio.wait_for(body(adjust, pause), moment)
                else:
                    task = asyncio.ensure_future(body(adjust, pause))
                    asyncio.get_running_loop().call_later(moment, task.cancel)
                    await task
                ledger["returned"] += 1
            except (asyncio.CancelledError, TimeoutError):
                ledger["cancelled"] += 1

    workers = [asyncio.ensure_future(worker(rng.randrange(2**32))) for _ in range(20)]
    finished, stuck = await asyncio.wait(workers, timeout=600)  # a hang guard
    assert not stuck
    for task in finished:
        task.result()
    assert ledger["returned"] + ledger["cancelled"] == 20 * per_worker
    await mine.close()
    assert mine.get_cache_stats().abandoned_at_close == 0
    assert await consumed(limiter) == ledger["owed"]
