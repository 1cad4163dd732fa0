"""The "regions" phase of `benchmarks.run`: three simulated Regions of an MRSC global table
(tests/support/regions.py; docs/multi-region.md), ours only, on an engine of its own.

    python -m benchmarks.regions [--quick]

1. **latency**: per Region, warm single-resource acquires one after another: p50 / p99 under the
   simulated round trips (2 ms to the local endpoint, 15-70 ms between Regions: a write waits
   for the nearest other Region), requests and WCU per call (the Region written; every other
   replica Region bills one replicated write unit more);
2. **conflicts**: the three Regions acquire on one organisation at once, conflicts
   (`ReplicatedWriteConflictException`, retried at once) per 1,000 calls without regional shards
   (every Region on the one item) and with them (after the bucket split: the steady state);
3. **transfers**: a hot organisation with a daily quota and traffic 60/20/20 over the Regions:
   transfers per 1,000 calls, and what was admitted against the quota (never more).

Wall-time figures here are the simulated latencies plus this machine's own: read them for the
shape (who waits for whom), not as AWS's numbers; counts (requests, WCU, conflicts, transfers)
are exact.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.regions import DEFAULT_REGIONS, Regions, regions  # noqa: E402
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository  # noqa: E402
from zae_limiter.instrumentation import RequestEvent  # noqa: E402
from zae_limiter.local import (  # noqa: E402
    LOCAL_ACCESS_KEY_ID,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

FULL = {"latency_calls": 300, "contention_calls": 100, "tasks": 4, "transfer_calls": 1_500}
QUICK = {"latency_calls": 30, "contention_calls": 20, "tasks": 2, "transfer_calls": 200}


class Wire:
    """Requests, write units and conflicts a repository saw (its request hook)."""

    def __init__(self) -> None:
        self.requests = 0
        self.wcu = 0.0
        self.outcomes: Counter[str] = Counter()

    def __call__(self, event: RequestEvent) -> None:
        self.requests += 1
        self.wcu += event.write_units or 0.0
        self.outcomes[event.outcome] += 1


async def _open(sim: Regions, table: str, region: str) -> Repository:
    return await Repository.open(
        table=table, endpoint_url=sim.url(region), region=region, acquire_timeout=30
    )


async def _admit(limiter: RateLimiter, entity: str, amounts: dict[str, int]) -> bool:
    try:
        async with limiter.acquire(entity, "api", amounts):
            return True
    except RateLimitExceeded:
        return False


async def latency(sim: Regions, table: str, calls: int) -> dict[str, Any]:
    """Per Region: p50/p99 of warm single-resource acquires, requests and WCU per call."""
    out: dict[str, Any] = {}
    for region in sim.names:
        repo = await _open(sim, table, region)
        wire = Wire()
        try:
            limiter = RateLimiter(repo)
            entity = f"user-{region}"
            for _ in range(5):
                await _admit(limiter, entity, {"rps": 1})
            repo.add_request_listener(wire)
            took = []
            for _ in range(calls):
                started = time.perf_counter()
                await _admit(limiter, entity, {"rps": 1})
                took.append((time.perf_counter() - started) * 1000)
        finally:
            await repo.close()
        ordered = sorted(took)
        out[region] = {
            "p50_ms": round(statistics.median(ordered), 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
            "requests_per_call": wire.requests / calls,
            "wcu_per_call": wire.wcu / calls,
            "replicated_write_units_per_call": wire.wcu / calls * (len(sim.names) - 1),
            "simulated_second_region_ms": sim.second_region_ms(region),
        }
    return out


async def conflicts(sim: Regions, table: str, calls: int, tasks: int) -> dict[str, Any]:
    """Conflicts per 1,000 calls on one organisation, without and with regional shards."""
    repos = [await _open(sim, table, region) for region in sim.names]
    limiters = [RateLimiter(repo) for repo in repos]
    result: dict[str, Any] = {}
    try:
        for mode, entity in (("without", "org-shared"), ("with", "org-regional")):
            if mode == "without":  # every Region writes the one item (no split)
                saved = [
                    (r.scope.admission.regional, r.scope.admission.shards.regional) for r in repos
                ]
                for repo in repos:
                    repo.scope.admission.regional = repo.scope.admission.shards.regional = None
            for _ in range(10):  # warm up (with: until the bucket has split into regional shards)
                await asyncio.gather(*(_admit(lim, entity, {"rps": 1}) for lim in limiters))
                for repo in repos:
                    await repo.scope.admission.settle_splits()
            await asyncio.sleep(2 * sim.window_ms * sim.scale / 1000)
            before = sim.total("conflict")

            async def task(limiter: RateLimiter, entity: str) -> None:
                for _ in range(calls):
                    await _admit(limiter, entity, {"rps": 1})

            await asyncio.gather(*(task(lim, entity) for lim in limiters for _ in range(tasks)))
            total = calls * tasks * len(limiters)
            shards = (await repos[0].get_buckets(entity, "api"))[0].shard_count
            result[mode] = {
                "calls": total,
                "conflicts": sim.total("conflict") - before,
                "per_1000_calls": round((sim.total("conflict") - before) * 1000 / total, 1),
                "shards": shards,
            }
            if mode == "without":
                for repo, (regional, chooser) in zip(repos, saved, strict=True):
                    repo.scope.admission.regional = regional
                    repo.scope.admission.shards.regional = chooser
    finally:
        for repo in repos:
            await repo.close()
    return result


async def transfers(sim: Regions, table: str, calls: int) -> dict[str, Any]:
    """A hot organisation with a daily quota, traffic 60/20/20: transfers per 1,000 calls."""
    repos = [await _open(sim, table, region) for region in sim.names]
    limiters = [RateLimiter(repo) for repo in repos]
    quota = calls * 2 // 3  # the traffic asks for more than the quota
    try:
        await repos[0].set_resource_defaults("jobs", [Limit.quota("runs", quota, cron="0 0 * * *")])
        await repos[0].set_shards("org-hot", "jobs", 4)
        shares = (0.6, 0.2, 0.2)
        admitted = 0

        async def region_calls(limiter: RateLimiter, count: int) -> int:
            got = 0
            for _ in range(count):
                try:
                    async with limiter.acquire("org-hot", "jobs", {"runs": 1}):
                        got += 1
                except RateLimitExceeded:
                    pass
            return got

        counts = [int(calls * share) for share in shares]
        admitted = sum(
            await asyncio.gather(
                *(region_calls(lim, n) for lim, n in zip(limiters, counts, strict=True))
            )
        )
        moved = [repo.scope.admission.waves.transfers.moved for repo in repos]
    finally:
        for repo in repos:
            await repo.close()
    total = sum(counts)
    return {
        "calls": total,
        "quota": quota,
        "admitted": admitted,
        "transfers": sum(moved),
        "transfers_by_region": dict(zip(sim.names, moved, strict=True)),
        "per_1000_calls": round(sum(moved) * 1000 / total, 1),
    }


async def run(endpoint: str, plan: dict[str, int]) -> dict[str, Any]:
    async with regions(endpoint, names=DEFAULT_REGIONS, seed=8) as sim:
        first = sim.names[0]
        table = f"bench-regions-{int(time.time())}"
        await Repository.create_table(table=table, endpoint_url=sim.url(first), region=first)
        admin = await _open(sim, table, first)
        await admin.set_resource_defaults("api", [Limit.per_second("rps", 1_000_000)])
        await admin.close()
        result = {
            "latency": await latency(sim, table, plan["latency_calls"]),
            "conflicts": await conflicts(sim, table, plan["contention_calls"], plan["tasks"]),
            "transfers": await transfers(sim, table, plan["transfer_calls"]),
            "transactions": sim.total("transaction"),
            "rtt_ms": {" - ".join(sorted(k)): v for k, v in sim.rtt_ms.items()},
        }
    return result


def bench_phase(quick: bool = False) -> dict[str, Any]:
    """Start an engine, run the three parts, stop the engine."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        result = asyncio.run(run(engine.endpoint_url, QUICK if quick else FULL))
    finally:
        engine.stop()
    return {"load_before": os.getloadavg()[0], **result}


def section(result: dict[str, Any]) -> str:
    """The report's section."""
    rows = [
        "| Region | p50 (ms) | p99 (ms) | nearest other Region (ms) | requests / call | WCU / call "
        "(written) | replicated write units / call |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for region, row in result["latency"].items():
        rows.append(
            f"| {region} | {row['p50_ms']} | {row['p99_ms']} | {row['simulated_second_region_ms']} "
            f"| {row['requests_per_call']:.2f} | {row['wcu_per_call']:.2f} "
            f"| {row['replicated_write_units_per_call']:.2f} |"
        )
    conflict = result["conflicts"]
    moved = result["transfers"]
    return "\n\n".join(
        [
            "Three simulated Regions (round trips "
            + ", ".join(f"{k} {v} ms" for k, v in result["rtt_ms"].items())
            + "; 2 ms to the local endpoint). A write waits for the nearest other Region.",
            "\n".join(rows),
            f"Conflicts on one organisation written by the three Regions at once: "
            f"{conflict['without']['per_1000_calls']} per 1,000 calls without regional shards "
            f"({conflict['without']['conflicts']} in {conflict['without']['calls']}, 1 shard); "
            f"{conflict['with']['per_1000_calls']} per 1,000 with them "
            f"({conflict['with']['conflicts']} in {conflict['with']['calls']}, "
            f"{conflict['with']['shards']} shards, the steady state).",
            f"A hot organisation (daily quota {moved['quota']}, traffic 60/20/20, "
            f"{moved['calls']} calls): {moved['transfers']} transfers, "
            f"{moved['per_1000_calls']} per 1,000 calls; admitted {moved['admitted']} of the "
            f"quota {moved['quota']}. Transactions sent: {result['transactions']}.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    result = bench_phase(args.quick)
    print(json.dumps(result, indent=1))
    print(section(result))


if __name__ == "__main__":
    main()
