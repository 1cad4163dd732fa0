"""A concurrency limit's warm cost and client CPU against a rate limit's (docs/concurrency.md).

    .venv/bin/python -m benchmarks.concurrency_cpu [--rounds 5] [--calls 1000]

Starts DynamoDB Local on 127.0.0.1 and warms 20 entities on two resources: ``rate`` declares
`Limit.per_minute("tokens", ...)`, ``held`` declares `Limit.concurrent("parallel", ...)`. A call
is a warm single-resource lease whose exit writes once: on ``rate`` the block reconciles with
`adjust(tokens=1)` (admit 1 write, exit 1 write), on ``held`` the hold is given back (the same
two writes). The two kinds take turns within each round; each round times `--calls` calls of
each with `time.process_time` (client CPU only; the JVM is another process) and counts requests
and WCU on the wire. Prints each round and the median ratio held / rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

ENTITIES = 20
KINDS = ("rate", "held")


class Wire:
    """Counts requests and consumed WCU of every call the repository's client makes."""

    def __init__(self) -> None:
        self.requests = 0
        self.wcu = 0.0

    def hook(self, operation: str, request: dict[str, Any], answer: dict[str, Any]) -> None:
        self.requests += 1
        self.wcu += float(answer.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0))


async def one_call(limiter: RateLimiter, kind: str, i: int) -> None:
    entity = f"u{i % ENTITIES}"
    if kind == "rate":
        async with limiter.acquire(entity, "rate", {"tokens": 1}) as lease:
            await lease.adjust(tokens=1)
    else:
        async with limiter.acquire(entity, "held", {"parallel": 1}):
            pass


async def run(endpoint: str, rounds: int, calls: int) -> dict[str, list[float]]:
    table = "concurrency-cpu"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(
        table=table, endpoint_url=endpoint, region=LOCAL_REGION, acquire_timeout=None
    )
    cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("rate", [Limit.per_minute("tokens", 10**12)])
        await limiter.set_resource_defaults("held", [Limit.concurrent("parallel", 10**6)])
        for kind in KINDS:
            for i in range(5 * ENTITIES):
                await one_call(limiter, kind, i)
        for number in range(rounds):
            order = KINDS if number % 2 == 0 else KINDS[::-1]
            for kind in order:
                started = time.process_time()
                for i in range(calls):
                    await one_call(limiter, kind, i)
                per_call = (time.process_time() - started) / calls * 1e6
                cpu[kind].append(per_call)
                print(f"round {number + 1} {kind}: {per_call:.0f} us client CPU per call")
        return cpu
    finally:
        await repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        cpu = asyncio.run(run(engine.endpoint_url, args.rounds, args.calls))
    finally:
        engine.stop()
    ratios = [h / r for h, r in zip(cpu["held"], cpu["rate"], strict=True)]
    print(
        f"median client CPU per call: rate {statistics.median(cpu['rate']):.0f} us, "
        f"held {statistics.median(cpu['held']):.0f} us; held / rate per round "
        f"{', '.join(f'{x:.3f}' for x in ratios)}, median {statistics.median(ratios):.3f}"
    )


if __name__ == "__main__":
    main()
