"""Exactly once under concurrent writers and faults: no lost, doubled or phantom debit.

The rules are in docs/on-unavailable.md ("Exactly once, with any number of writers").

Two repositories (two processes, as far as the library knows: own connections, caches and writer
ids) run N tasks each through a seeded fault-injecting proxy in front of DynamoDB Local: plain
acquires, adjusts up and down, `consume()` inside the block, and blocks that raise (refunded).
Afterwards every bucket's consumption equals the client ledger, its balance is capacity minus
consumption, and the entity whose every block raised is untouched. The limits are tight: a
quarter of a seed's calls fill them and the clock is fixed (no refill), so every seed reaches
them and what the acquires kept is checked against capacity (over-admission would fail it).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from typing import Any

import pytest

from support.clock import FakeClock
from support.faultproxy import KINDS, fault_proxy
from support.ledger import BucketKey, Ledger, Workload, compare, open_behind, run_tasks
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository

SEEDS = (1, 2, 3)
FAULTS = {kind: (kind,) for kind in KINDS} | {"all": KINDS}
READ_TIMEOUT_S = 2.0  # generous: a loaded machine must not time out on its own
#: No rejection cache: the clock is fixed, so its 1 s lifetime would never end, and an image that
#: showed the limit held by another process's debit (refunded since) would refuse every later
#: call without a request (docs/several-resources.md: the cache's one error, made permanent).
#: Every refusal is judged on an image DynamoDB returned.
REJECTION_CACHE_TTL = 0.0
#: Acquires per task and seed: 32 to 128 per seed (bounded requests; a busy lane folds many).
CALLS = {1: 16, 8: 6, 32: 2}
PROCESSES = 2
#: Of writes faulted: 32 tasks fold their calls into few writes, so more of them.
RATE = {1: 0.1, 8: 0.1, 32: 0.3}

#: Calls per seed (all of them reach the org's bucket, most the hot item), by tasks per process.
DEMAND = {tasks: PROCESSES * tasks * calls for tasks, calls in CALLS.items()}
#: Limits only acquires debit (adjust and consume() move `tpm`): what they keep never exceeds them.
NEVER_ADJUSTED = ("rpm", "usd")


def tight_limits(tasks: int) -> tuple[list[Limit], list[Limit]]:
    """`api` and `budget` limits a quarter of a seed's calls fill (the clock is fixed, nothing
    refills): the org's `rpm` and `usd` are reached together and every call after that must be
    refused naming its limit, unless a refund gave room back."""
    rpm = DEMAND[tasks] // 4
    api = [Limit.per_minute("rpm", rpm), Limit.per_minute("tpm", 8 * rpm)]
    return api, [Limit.per_day("usd", 3 * rpm)]


Limits = dict[BucketKey, Limit]


async def one_item(repo: Repository, tag: str, tasks: int) -> tuple[Workload, Limits]:
    """Every call on one bucket item; the ghost only ever raises."""
    hot, ghost = f"hot-{tag}", f"ghost-{tag}"
    work = Workload((hot,), "api", {"rpm": 1, "tpm": 5}, ghost=ghost)
    api, _ = tight_limits(tasks)
    limits = {(e, "api", lim.name): lim for e in (hot, ghost) for lim in api}
    return work, limits


def three_bucket_work(tag: str, tasks: int) -> tuple[Workload, Limits]:
    """Users of one organisation, cascading into it, each call on `api` and `budget`."""
    org = f"org-{tag}"
    users = tuple(f"user-{tag}-{i}" for i in range(3))
    ghost = f"ghost-{tag}"
    work = Workload(
        users,
        "api",
        {"rpm": 1, "tpm": 5},
        also={"budget": {"usd": 3}},
        parents={"api": org, "budget": org},
        ghost=ghost,
    )
    api, budget = tight_limits(tasks)
    limits: Limits = {}
    for entity in (*users, ghost, org):
        limits |= {(entity, "api", lim.name): lim for lim in api}
        limits |= {(entity, "budget", lim.name): lim for lim in budget}
    return work, limits


async def three_buckets(repo: Repository, tag: str, tasks: int) -> tuple[Workload, Limits]:
    work, limits = three_bucket_work(tag, tasks)
    org = work.parents["api"]
    await repo.create_entity(org)
    assert work.ghost is not None
    for user in (*work.entities, work.ghost):
        await repo.create_entity(user, parent_id=org, cascade=True)
    return work, limits


def over_admitted(ledger: Ledger, limits: Limits) -> dict[BucketKey, int]:
    """Buckets whose acquires kept more than the limit allows (the ledger is what they kept)."""
    return {
        key: ledger.kept[key] - limit.capacity
        for key, limit in limits.items()
        if key[2] in NEVER_ADJUSTED and ledger.kept[key] > limit.capacity
    }


async def open_admin(table: TableRef, clock: FakeClock, tasks: int) -> Repository:
    admin = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    api, budget = tight_limits(tasks)
    await admin.set_resource_defaults("api", api)
    await admin.set_resource_defaults("budget", budget)
    return admin


SCENARIOS = {"one-item": one_item, "three-buckets": three_buckets}


async def run_ledger(
    table: TableRef, clock: FakeClock, scenario: str, faults: str, tasks: int
) -> list[str]:
    """Every seed on its own entities of one table; returns what went wrong (empty: exact)."""
    admin = await open_admin(table, clock, tasks)
    problems: list[str] = []
    faulted = 0
    for seed in SEEDS:
        work, limits = await SCENARIOS[scenario](admin, f"s{seed}", tasks)
        async with fault_proxy(
            table.endpoint_url,
            seed=seed,
            rate=RATE[tasks],
            kinds=FAULTS[faults],
            delay_s=READ_TIMEOUT_S + 0.3,
            seconds=60,
        ) as proxy:
            repos = [
                await open_behind(
                    proxy.url,
                    table.name,
                    read_timeout=READ_TIMEOUT_S,
                    clock=clock,
                    rejection_cache_ttl=REJECTION_CACHE_TTL,
                )
                for _ in range(PROCESSES)
            ]
            try:
                ledger = await run_tasks(
                    [RateLimiter(r) for r in repos],
                    work,
                    tasks=tasks,
                    calls=CALLS[tasks],
                    seed=seed,
                )
                undecided = sum(r.get_cache_stats().undecided_writes for r in repos)
                local = sum(r.get_cache_stats().local_rejections for r in repos)
            finally:
                for repo in repos:
                    await repo.close()
        wrong = await compare(admin, work, ledger, limits)
        over = over_admitted(ledger, limits)
        print(
            f"ledger {scenario} {faults} tasks={tasks} seed={seed}: faults={proxy.faults} "
            f"admitted={ledger.admitted} rejected={ledger.rejected} refunded={ledger.refunded} "
            f"local_rejections={local} undecided={undecided} over={over} "
            f"mismatch={wrong} errors={ledger.errors}"
        )
        faulted += proxy.faults  # over the seeds: a seed of few writes may draw none
        if not ledger.admitted:
            problems.append(f"seed {seed}: nothing was admitted")
        if not ledger.rejected:
            problems.append(f"seed {seed}: the limit was never reached")
        if over:
            problems.append(f"seed {seed}: admitted over the limit {over}")
        if wrong or ledger.unavailable or ledger.contended or undecided:
            problems.append(
                f"seed {seed}: mismatch {wrong}, {ledger.unavailable} unavailable "
                f"{ledger.errors}, {ledger.contended} contended, {undecided} undecided"
            )
    await admin.close()
    if not faulted:
        problems.append("no fault was injected over the seeds")
    return problems


@pytest.mark.parametrize(
    "tasks", [1, 8, pytest.param(32, marks=pytest.mark.slow)], ids=lambda t: f"{t}tasks"
)
@pytest.mark.parametrize("faults", list(FAULTS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_every_bucket_matches_the_ledger_over_three_seeds(
    table: TableRef, clock: FakeClock, scenario: str, faults: str, tasks: int
) -> None:
    assert await run_ledger(table, clock, scenario, faults, tasks) == []


def ledger_process(table: str, endpoint: str, tag: str, seed: int) -> dict[str, Any]:
    """One OS process: 8 tasks of the three-bucket workload through its own proxy (every fault
    kind at 10 %); returns its ledger."""

    async def run() -> dict[str, Any]:
        work, _ = three_bucket_work(tag, 8)
        async with fault_proxy(
            endpoint,
            seed=seed,
            rate=RATE[8],
            kinds=KINDS,
            delay_s=READ_TIMEOUT_S + 0.3,
            at_least=1,  # each process must see a fault, whatever its writer id draws
        ) as proxy:
            repo = await open_behind(
                proxy.url,
                table,
                read_timeout=READ_TIMEOUT_S,
                clock=FakeClock(),
                rejection_cache_ttl=REJECTION_CACHE_TTL,
            )
            try:
                ledger = await run_tasks([RateLimiter(repo)], work, tasks=8, calls=6, seed=seed)
                undecided = repo.get_cache_stats().undecided_writes
            finally:
                await repo.close()
        return {
            "kept": list(ledger.kept.items()),
            "admitted": ledger.admitted,
            "problems": ledger.unavailable + ledger.contended + undecided,
            "errors": ledger.errors,
            "faults": proxy.faults,
        }

    return asyncio.run(run())


async def test_two_os_processes_match_the_ledger(table: TableRef, clock: FakeClock) -> None:
    admin = await open_admin(table, clock, 8)
    work, limits = await three_buckets(admin, "os", 8)
    context = multiprocessing.get_context("spawn")
    env_backup = dict(os.environ)
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(
            ledger_process, [(table.name, table.endpoint_url, "os", seed) for seed in (11, 12)]
        )
    os.environ.update(env_backup)
    ledger = Ledger()
    for result in results:
        for key, amount in result["kept"]:
            ledger.kept[tuple(key)] += amount
        ledger.admitted += result["admitted"]
    print("ledger os-processes:", [(r["faults"], r["admitted"], r["errors"]) for r in results])
    assert all(r["faults"] > 0 and r["problems"] == 0 for r in results)
    assert await compare(admin, work, ledger, limits) == {}
    assert over_admitted(ledger, limits) == {}
    await admin.close()
