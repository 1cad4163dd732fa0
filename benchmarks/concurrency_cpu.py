"""A concurrency limit's warm cost and client CPU against a rate limit's (docs/concurrency.md).

    .venv/bin/python -m benchmarks.concurrency_cpu [--rounds 25] [--calls 300]

Starts DynamoDB Local on 127.0.0.1 and warms 20 entities on two resources: ``rate`` declares
`Limit.per_minute("tokens", ...)`, ``held`` declares `Limit.concurrent("parallel", ...)`. A call
is a warm single-resource lease whose exit writes once: on ``rate`` the block reconciles with
`adjust(tokens=1)` (admit 1 write, exit 1 write), on ``held`` the hold is given back (the same
two writes). The two kinds take turns within each round; each round times `--calls` calls of
each with `time.process_time` (client CPU only; the JVM is another process) and counts requests
and WCU on the wire (asserted: 1 and 1 for the admit, 1 and 1 for the exit; reads, the
config cache's refresh, are counted apart). Prints each round
and the median ratio held / rate. `benchmarks.run` runs it as its "concurrency" phase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.instrumentation import RequestEvent
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

ENTITIES = 20
KINDS = ("rate", "held")
READS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})


class Wire:
    """Counts the write requests, consumed WCU and reads of every DynamoDB request the
    repository sends (reads: the config cache's periodic refresh, amortised over many calls)."""

    def __init__(self) -> None:
        self.requests = 0
        self.wcu = 0.0
        self.reads = 0

    def __call__(self, event: RequestEvent) -> None:
        if event.operation in READS:
            self.reads += 1
            return
        self.requests += 1
        self.wcu += event.write_units or 0.0


async def set_up(limiter: RateLimiter) -> None:
    """The two resources the calls use: ``rate`` a rate limit, ``held`` a concurrency limit."""
    await limiter.set_resource_defaults("rate", [Limit.per_minute("tokens", 10**12)])
    await limiter.set_resource_defaults("held", [Limit.concurrent("parallel", 10**6)])


async def one_call(limiter: RateLimiter, kind: str, i: int) -> None:
    """One call of `kind` on the `i`-th entity (of `ENTITIES`): admit and exit, two writes."""
    entity = f"u{i % ENTITIES}"
    if kind == "rate":
        async with limiter.acquire(entity, "rate", {"tokens": 1}) as lease:
            await lease.adjust(tokens=1)
    else:
        async with limiter.acquire(entity, "held", {"parallel": 1}):
            pass


@dataclass
class Measured:
    """Per kind and round: client CPU per call (us); per kind: requests and WCU per call."""

    cpu: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    wire: dict[str, Wire] = field(default_factory=lambda: {k: Wire() for k in KINDS})

    def ratios(self) -> list[float]:
        return [h / r for h, r in zip(self.cpu["held"], self.cpu["rate"], strict=True)]


async def run(endpoint: str, rounds: int, calls: int) -> Measured:
    table = "concurrency-cpu"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    wire = Wire()
    repo = await Repository.open(
        table=table,
        endpoint_url=endpoint,
        region=LOCAL_REGION,
        acquire_timeout=None,
        on_request=wire,
    )
    measured = Measured()
    try:
        limiter = RateLimiter(repo)
        await set_up(limiter)
        for kind in KINDS:
            for i in range(5 * ENTITIES):
                await one_call(limiter, kind, i)
        for number in range(rounds):
            order = KINDS if number % 2 == 0 else KINDS[::-1]
            for kind in order:
                before = (wire.requests, wire.wcu, wire.reads)
                started = time.process_time()
                for i in range(calls):
                    await one_call(limiter, kind, i)
                per_call = (time.process_time() - started) / calls * 1e6
                measured.cpu[kind].append(per_call)
                measured.wire[kind].requests += wire.requests - before[0]
                measured.wire[kind].wcu += wire.wcu - before[1]
                measured.wire[kind].reads += wire.reads - before[2]
                print(f"round {number + 1} {kind}: {per_call:.0f} us client CPU per call")
        return measured
    finally:
        await repo.close()


def measure(rounds: int, calls: int) -> dict[str, Any]:
    """Start an engine, alternate the two kinds for `rounds` rounds, stop the engine. Asserts
    the warm cost of both: one request and one WCU for the admit, the same for the exit."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        measured = asyncio.run(run(engine.endpoint_url, rounds, calls))
    finally:
        engine.stop()
    per_call = {
        kind: {"requests": w.requests / (rounds * calls), "wcu": w.wcu / (rounds * calls)}
        for kind, w in measured.wire.items()
    }
    for kind, cost in per_call.items():  # admit + exit, each 1 write request and 1 WCU
        assert cost == {"requests": 2.0, "wcu": 2.0}, (kind, cost)
    reads = {kind: w.reads for kind, w in measured.wire.items()}
    ratios = measured.ratios()
    return {
        "rounds": rounds,
        "calls": calls,
        "cpu_us": measured.cpu,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "per_call": per_call,
        "reads": reads,
    }


def bench_phase(rounds: int = 25, calls: int = 300) -> dict[str, Any]:
    """The "concurrency" phase of `benchmarks.run` (its own engine). Many short rounds: on a
    shared VM one round's CPU time swings by +-30 % (time stolen from the vCPU is charged to the
    running process), and the median of 25 alternated ratios is steadier than that of 7 long
    ones."""
    load = os.getloadavg()[0]
    return {"load_before": load, **measure(rounds, calls)}


def section(result: dict[str, Any]) -> str:
    """The report's section: the median ratio against the 5 % acceptance, and the rounds."""
    ratio = result["median_ratio"]
    verdict = "within" if abs(ratio - 1) <= 0.05 else "NOT within"
    rows = ["| round | rate (us) | held (us) | held / rate |", "|---|---|---|---|"]
    for i, (r, h) in enumerate(
        zip(result["cpu_us"]["rate"], result["cpu_us"]["held"], strict=True)
    ):
        rows.append(f"| {i + 1} | {r:.0f} | {h:.0f} | {h / r:.3f} |")
    return "\n\n".join(
        [
            f"{result['calls']} warm calls per kind per round, the kinds alternating, "
            f"{result['rounds']} rounds (load {result['load_before']:.1f} at start). A call with "
            f"a concurrency limit costs {ratio:.3f} x the client CPU of one with a rate limit "
            f"(median of the rounds): {verdict} 5 %. Both cost 2 write requests and 2 WCU per "
            f"call (admit and exit, asserted); config refresh reads over all the calls: "
            f"{result['reads']}.",
            "\n".join(rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    result = measure(args.rounds, args.calls)
    print(
        f"median client CPU per call: rate {statistics.median(result['cpu_us']['rate']):.0f} us, "
        f"held {statistics.median(result['cpu_us']['held']):.0f} us; held / rate per round "
        f"{', '.join(f'{x:.3f}' for x in result['ratios'])}, median {result['median_ratio']:.3f}; "
        f"per call {result['per_call']}"
    )


if __name__ == "__main__":
    main()
