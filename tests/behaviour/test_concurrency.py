"""Many processes on one bucket with the real clock: no lost update, no over-admission
(docs/contributing.md)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time

from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

PROCESSES = 4
TASKS = 16
SECONDS = 10.0
RATE_PER_MINUTE = 600
BURST = 100


def hammer(table: str, endpoint: str, seconds: float) -> int:
    """One process: TASKS tasks acquiring 1 token for `seconds` once connected; returns the
    admitted count."""

    async def run() -> int:
        repo = await Repository.open(table=table, endpoint_url=endpoint, rejection_cache_ttl=0.05)
        limiter = RateLimiter(repo)
        admitted = 0
        until = time.time() + seconds

        async def task() -> None:
            nonlocal admitted
            while time.time() < until:
                try:
                    async with limiter.acquire("hot", "api", {"rpm": 1}):
                        admitted += 1
                except RateLimitExceeded:
                    await asyncio.sleep(0.01)

        await asyncio.gather(*(task() for _ in range(TASKS)))
        await repo.close()
        return admitted

    return asyncio.run(run())


async def test_processes_never_admit_more_than_burst_plus_refill(table: TableRef) -> None:
    repo = await Repository.open(table=table.name, endpoint_url=table.endpoint_url)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", RATE_PER_MINUTE, BURST)])
    context = multiprocessing.get_context("spawn")
    env_backup = dict(os.environ)
    started = time.time()  # the children start later (import, connect): elapsed is an upper bound
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(hammer, [(table.name, table.endpoint_url, SECONDS)] * PROCESSES)
    elapsed = time.time() - started
    os.environ.update(env_backup)
    admitted = sum(results)
    allowed = BURST + RATE_PER_MINUTE * elapsed / 60
    assert admitted <= allowed
    assert admitted > 0
    [state] = await repo.get_buckets("hot")
    assert state.total_consumed == admitted  # every admission counted exactly once
    await repo.close()
