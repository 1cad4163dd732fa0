"""Where a warm acquire's client CPU goes: CPU per call, and a cProfile of the calls, on demand.

    .venv/bin/python -m benchmarks.acquire_profile [--calls 3000] [--out /tmp/acquire.prof]
        [--canned]

Starts DynamoDB Local on 127.0.0.1, warms 20 entities, then times `--calls` warm single-resource
acquires (one UpdateItem each) with `time.process_time` and profiles the same number again with a
CPU-time timer; the profile goes to `--out` (read it with `python -m pstats`). `--canned` answers
each request with the last answer its item got instead of sending it (no socket, no waiting): the
library's own CPU per call, without the exchange. Profiles inflate call-heavy code; compare the
plain CPU figures, and alternate variants in one process when a change is small.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import time
from collections.abc import Awaitable, Callable

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.dynamo import http
from zae_limiter.dynamo.connections import Answer
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

ENTITIES = 20


def can_answers() -> None:
    """From now on each request gets the answer its item's last request got (sent once first)."""
    last: dict[bytes, Answer] = {}
    send = http.HttpPath._post

    async def canned(self: http.HttpPath, prepared: http.PreparedRequest) -> Answer:
        key = prepared.body.split(b'"Key":', 1)[1].split(b"}}", 1)[0]
        if key not in last:
            last[key] = await send(self, prepared)
        return last[key]

    http.HttpPath._post = canned  # type: ignore[method-assign]


async def run(endpoint: str, calls: int, out: str, canned: bool) -> float:
    table = "acquire-profile"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(
        table=table, endpoint_url=endpoint, region=LOCAL_REGION, acquire_timeout=None
    )
    try:
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 10**12)])

        async def one(i: int) -> None:
            async with limiter.acquire(f"u{i % ENTITIES}", "api", consume={"tokens": 1}):
                pass

        await loop_of(one, 10 * ENTITIES)
        if canned:
            can_answers()
            await loop_of(one, 2 * ENTITIES)
        started = time.process_time()
        await loop_of(one, calls)
        per_call = (time.process_time() - started) / calls * 1e6
        profile = cProfile.Profile(time.process_time)
        profile.enable()
        await loop_of(one, calls)
        profile.disable()
        profile.dump_stats(out)
        return per_call
    finally:
        await repo.close()


async def loop_of(call: Callable[[int], Awaitable[None]], n: int) -> None:
    for i in range(n):
        await call(i)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", default="/tmp/acquire.prof")
    parser.add_argument("--canned", action="store_true", help="no exchange: the library's CPU")
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        per_call = asyncio.run(run(engine.endpoint_url, args.calls, args.out, args.canned))
    finally:
        engine.stop()
    what = "library only (canned answers)" if args.canned else "with the exchange"
    print(f"client CPU per warm acquire, {what}: {per_call:.0f} us; profile in {args.out}")


if __name__ == "__main__":
    main()
