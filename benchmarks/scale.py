"""How cost grows: workloads of the scale phases, written against the API both libraries share.

Imported by the worker under either library (like benchmarks/scenarios.py). Each function answers
one question of docs/performance.md "How cost grows":

- `resources_per_call`: one acquire over 1, 2, 4, 8 or 16 resources (the first named, the rest
  in `also`): round trips, requests and WCU of one warm call; client CPU and p50/p99 over many.
- `entities_growth`: entities met for the first time in steps (10 -> 10,000): the cold-start cost
  per new entity, then the warm cost on a sample of every entity met so far (it must stay flat).
- `shared_setup` / `shared_run`: one table, several processes (one worker each) running tasks
  at the same moment, for a fixed time: one hot item far below its limit, or a hot organisation
  whose per-day cap the resource cascades to (what was admitted against what was allowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

from benchmarks.impls import Impl
from benchmarks.scenarios import (
    Tables,
    counted_acquire,
    new_table_name,
    timed_loop,
    wire_summary,
)
from benchmarks.stats import percentile
from zae_limiter import Limit, RateLimiter, RateLimitExceeded

UNREACHABLE = 10**12
RESOURCE_COUNTS = (1, 2, 4, 8, 16)
RESOURCE_ENTITIES = 4


def _lat_summary(sample: dict[str, Any]) -> dict[str, Any]:
    n = len(sample["lat_us"])
    return {
        "n": n,
        "p50_us": percentile(sample["lat_us"], 50),
        "p99_us": percentile(sample["lat_us"], 99),
        "cpu_us_per_call": sample["cpu_s"] * 1e6 / n if n else None,
        "outcomes": sample["outcomes"],
    }


async def resources_per_call(
    impl: Impl, recorder: Any, *, count: int, calls: int
) -> dict[str, Any]:
    """`count` resources in one acquire (one limit each, unreachable), warm, sequential."""
    tables = Tables(impl)
    try:
        _, _, limiter = await tables.fresh(f"res{count}")
        names = [f"r{i}" for i in range(count)]
        for name in names:
            await limiter.set_resource_defaults(name, [Limit.per_minute("t", UNREACHABLE)])
        entities = [f"e{i}" for i in range(RESOURCE_ENTITIES)]
        also = {name: {"t": 1} for name in names[1:]} or None

        async def call(i: int) -> None:
            async with limiter.acquire(
                entities[i % RESOURCE_ENTITIES], names[0], consume={"t": 1}, also=also
            ):
                pass

        await timed_loop(call, 2 * RESOURCE_ENTITIES)  # every item exists, every cache warm
        with recorder.block() as block:
            await call(0)
        sample = await timed_loop(call, calls)
        return {"resources": count, **wire_summary(block), **_lat_summary(sample)}
    finally:
        await tables.close()


async def entities_growth(
    impl: Impl, recorder: Any, *, levels: list[int], sample: int, concurrency: int = 16
) -> list[dict[str, Any]]:
    """Entities met in steps up to each level: cold cost per new entity, then warm cost."""
    tables = Tables(impl)
    try:
        _, _, limiter = await tables.fresh("entities")
        await limiter.set_resource_defaults("api", [Limit.per_minute("t", UNREACHABLE)])

        async def acquire(entity: str) -> None:
            async with limiter.acquire(entity, "api", consume={"t": 1}):
                pass

        rows: list[dict[str, Any]] = []
        met = 0
        for level in levels:
            new = [f"ent-{i}" for i in range(met, level)]
            queue = iter(new)
            errors: Counter[str] = Counter()

            async def worker(queue: Iterator[str], errors: Counter[str]) -> None:
                for entity in queue:  # shared iterator: each entity taken once
                    try:
                        await acquire(entity)
                    except Exception as exc:
                        errors[type(exc).__name__] += 1

            with recorder.block() as cold:
                cpu0, wall0 = time.process_time(), time.perf_counter()
                await asyncio.gather(*(worker(queue, errors) for _ in range(concurrency)))
                cold_cpu, cold_wall = time.process_time() - cpu0, time.perf_counter() - wall0
            met = level
            step = max(1, met // sample)
            chosen = [f"ent-{i}" for i in range(0, met, step)][:sample]
            # the sample in a fixed shuffled order: not the order the entities were created in
            chosen = chosen[::2] + chosen[1::2]

            async def warm(i: int, chosen: list[str] = chosen) -> None:
                await acquire(chosen[i % len(chosen)])

            with recorder.block() as warm_block:
                warm_sample = await timed_loop(warm, len(chosen))
            n_new = max(len(new), 1)
            rows.append(
                {
                    "entities": level,
                    "new": len(new),
                    "cold_errors": dict(errors),
                    "cold_requests_per_entity": len(cold.requests) / n_new,
                    "cold_rcu_per_entity": cold.rcu / n_new,
                    "cold_wcu_per_entity": cold.wcu / n_new,
                    "cold_cpu_us_per_entity": cold_cpu * 1e6 / n_new,
                    "cold_entities_per_s": len(new) / cold_wall if cold_wall else None,
                    "warm_requests_per_call": len(warm_block.requests) / len(chosen),
                    "warm_rcu_per_call": warm_block.rcu / len(chosen),
                    "warm_wcu_per_call": warm_block.wcu / len(chosen),
                    **{f"warm_{k}": v for k, v in _lat_summary(warm_sample).items()},
                }
            )
        return rows
    finally:
        await tables.close()


# --- one table, several processes ------------------------------------------------------------

SHARED_KINDS = ("hot_item", "hot_org")
HOT_ITEM_RATE_PER_MINUTE = 10_000_000  # far below reach: every call should be admitted


async def shared_setup(
    impl: Impl, *, kind: str, processes: int, tasks: int, org_cap: int
) -> dict[str, Any]:
    """A table for a `shared_run` of `processes` x `tasks`; returns its name and what it allows.

    hot_item: one entity, one resource, 10,000,000 per minute. hot_org: one user per task
    (`u<process>-<task>`), all under `org-hot`, whose `units` per-day cap of `org_cap` the
    resource cascades to (the users' own limit is unreachable).
    """
    table = new_table_name(impl, kind.replace("_", "-"))
    await impl.create_table(table)
    repo = await impl.open(table)
    try:
        limiter = RateLimiter(repo)
        if kind == "hot_item":
            await limiter.set_resource_defaults(
                "api", [Limit.per_minute("rpm", HOT_ITEM_RATE_PER_MINUTE)]
            )
            async with limiter.acquire("hot", "api", consume={"rpm": 1}):
                pass  # the item exists before the clock starts
            return {"table": table, "allowed_per_minute": HOT_ITEM_RATE_PER_MINUTE}
        await limiter.set_resource_defaults("search", [Limit.per_day("units", UNREACHABLE)])
        await limiter.create_entity(entity_id="org-hot")
        for process in range(processes):
            for task in range(tasks):
                await limiter.create_entity(entity_id=f"u{process}-{task}", parent_id="org-hot")
        await repo.set_resource_cascade("search", True)
        await limiter.set_limits("org-hot", [Limit.per_day("units", org_cap)], resource="search")
        return {"table": table, "allowed": org_cap}
    finally:
        await repo.close()


async def shared_run(
    impl: Impl,
    recorder: Any,
    *,
    kind: str,
    table: str,
    process: int,
    tasks: int,
    seconds: float,
    start_at: float,
) -> dict[str, Any]:
    """This process's `tasks` loops from wall-clock `start_at` for `seconds`."""
    tables = Tables(impl)
    try:
        _, limiter = await tables.open(table)
        if kind == "hot_item":

            def call_of(task: int) -> tuple[str, str, dict[str, int]]:
                return "hot", "api", {"rpm": 1}
        else:

            def call_of(task: int) -> tuple[str, str, dict[str, int]]:
                return f"u{process}-{task}", "search", {"units": 1}

        warm_admitted = 0
        for task in range(tasks):  # warm this process's caches (counted: the limit saw it)
            entity, resource, consume = call_of(task)
            with contextlib.suppress(RateLimitExceeded):
                async with limiter.acquire(entity, resource, consume=consume):
                    pass
                warm_admitted += 1
        outcomes: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        latencies: list[int] = []
        await asyncio.sleep(max(0.0, start_at - time.time()))
        until = time.perf_counter() + seconds

        async def loop(task: int) -> None:
            entity, resource, consume = call_of(task)
            while time.perf_counter() < until:
                t0 = time.perf_counter_ns()
                await counted_acquire(limiter, entity, resource, consume, outcomes, errors)
                latencies.append((time.perf_counter_ns() - t0) // 1000)

        with recorder.block() as block:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(loop(task) for task in range(tasks)))
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return {
            "process": process,
            "admitted": outcomes["admitted"],
            "rejected": outcomes["rejected"],
            "warm_admitted": warm_admitted,
            "errors": dict(errors),
            "wall_s": wall,
            "cpu_s": cpu,
            "lat_us": latencies,
            **{
                f"wire_{k}": v
                for k, v in wire_summary(block, with_round_trips=False).items()
                if k in ("requests", "wcu", "by_operation")
            },
        }
    finally:
        await tables.close()


def merge_shared(
    kind: str, setup: dict[str, Any], parts: list[dict[str, Any]], *, seconds: float
) -> dict[str, Any]:
    """The processes' results of one `shared_run` as one row (pure)."""
    latencies = [v for p in parts for v in p["lat_us"]]
    admitted = sum(p["admitted"] for p in parts)
    calls = (
        admitted + sum(p["rejected"] for p in parts) + sum(sum(p["errors"].values()) for p in parts)
    )
    wall = max((p["wall_s"] for p in parts), default=seconds) or seconds
    errors: Counter[str] = Counter()
    for p in parts:
        errors.update(p["errors"])
    wcu = sum(p["wire_wcu"] for p in parts)
    row: dict[str, Any] = {
        "kind": kind,
        "processes": len(parts),
        "calls": calls,
        "admitted": admitted,
        "rejected": sum(p["rejected"] for p in parts),
        "errors": dict(errors),
        "calls_per_s": calls / wall,
        "admitted_per_s": admitted / wall,
        "p50_us": percentile(latencies, 50),
        "p99_us": percentile(latencies, 99),
        "cpu_us_per_call": sum(p["cpu_s"] for p in parts) * 1e6 / calls if calls else None,
        "requests_per_call": sum(p["wire_requests"] for p in parts) / calls if calls else None,
        "wcu_per_admitted": wcu / admitted if admitted else None,
    }
    if kind == "hot_org":
        total = admitted + sum(p["warm_admitted"] for p in parts)
        row.update(
            allowed=setup["allowed"],
            admitted_with_warmup=total,
            over_admitted=max(0, total - setup["allowed"]),
        )
    else:
        row.update(allowed=f"{setup['allowed_per_minute']:,} per minute", over_admitted=0)
    return row
