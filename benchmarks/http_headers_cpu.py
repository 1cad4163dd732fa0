"""CPU per call of zae_limiter.integrations.headers on a real lease and rejection (DynamoDB Local
started here).

    .venv/bin/python benchmarks/http_headers_cpu.py

Counts process CPU time (time.process_time), so a loaded machine inflates it less than wall time.
"""

from __future__ import annotations

import asyncio
import os
import time

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.integrations.headers import problem_details, ratelimit_headers
from zae_limiter.local import LOCAL_REGION, start_engine
from zae_limiter.local.engine import ISOLATED_AWS_ENV

CALLS = 20_000


def per_call_us(fn: object, *args: object) -> float:
    start = time.process_time()
    for _ in range(CALLS):
        fn(*args)  # type: ignore[operator]
    return (time.process_time() - start) / CALLS * 1e6


async def main(endpoint: str) -> None:
    table = "bench-http-headers"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    async with RateLimiter(repo) as limiter:
        limits = [Limit.per_day("rpm", 10), Limit.per_minute("tokens", 10_000)]
        await limiter.set_resource_defaults("search", limits)
        async with limiter.acquire("u", "search", {"rpm": 1, "tokens": 1}) as lease:
            cost = per_call_us(ratelimit_headers, lease)
            print(f"ratelimit_headers(lease), 2 limits: {cost:.1f} us")
        try:
            async with limiter.acquire("u", "search", {"rpm": 10}):
                pass
        except RateLimitExceeded as exc:

            def answer(e: RateLimitExceeded) -> None:
                ratelimit_headers(e)
                problem_details(e)

            print(f"ratelimit_headers + problem_details(exc): {per_call_us(answer, exc):.1f} us")


if __name__ == "__main__":
    os.environ.update(ISOLATED_AWS_ENV)  # dummy credentials for the local engine
    engine = start_engine(engine="dynamodb-local")
    try:
        asyncio.run(main(engine.endpoint_url))
    finally:
        engine.stop()
