"""Exactly once under concurrent writers and faults (reference.md §12.1-12.4).

The rules are in docs/on-unavailable.md ("Exactly once, with any number of writers").

Two repositories (two processes, as far as the library knows: own connections, caches and writer
ids) run N tasks each through a seeded fault-injecting proxy in front of DynamoDB Local: plain
acquires, adjusts up and down, `consume()` inside the block, and blocks that raise (refunded).
Afterwards every bucket's consumption equals the client ledger, its balance is capacity minus
consumption (the clock is fixed: no refill, so nothing was admitted beyond capacity), and the
entity whose every block raised is untouched.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.config import Config

from support.clock import FakeClock
from support.faultproxy import KINDS, fault_proxy
from support.ledger import BucketKey, Workload, compare, run_tasks
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository

SEEDS = (1, 2, 3)
FAULTS = {kind: (kind,) for kind in KINDS} | {"all": KINDS}
READ_TIMEOUT_S = 1.0
#: Acquires per task: about 64 per run whatever the concurrency (bounded requests per run).
CALLS = {1: 30, 8: 4, 32: 1}
PROCESSES = 2
RATE = 0.1  # of writes faulted

API = [Limit.per_minute("rpm", 1_000_000), Limit.per_minute("tpm", 10_000_000)]
BUDGET = [Limit.per_day("usd", 1_000_000)]


async def one_item(repo: Repository) -> tuple[Workload, dict[BucketKey, Limit]]:
    """Every call on one bucket item; `ghost` only ever raises."""
    await repo.set_resource_defaults("api", API)
    work = Workload(("hot",), "api", {"rpm": 1, "tpm": 5}, ghost="ghost")
    limits = {(e, "api", lim.name): lim for e in ("hot", "ghost") for lim in API}
    return work, limits


async def three_buckets(repo: Repository) -> tuple[Workload, dict[BucketKey, Limit]]:
    """Users of one organisation, cascading into it, each call on `api` and `budget`."""
    await repo.set_resource_defaults("api", API)
    await repo.set_resource_defaults("budget", BUDGET)
    await repo.create_entity("org")
    users = ("user-0", "user-1", "user-2")
    for user in (*users, "user-ghost"):
        await repo.create_entity(user, parent_id="org", cascade=True)
    work = Workload(
        users,
        "api",
        {"rpm": 1, "tpm": 5},
        also={"budget": {"usd": 3}},
        parents={"api": "org", "budget": "org"},
        ghost="user-ghost",
    )
    limits: dict[BucketKey, Limit] = {}
    for entity in (*users, "user-ghost", "org"):
        limits |= {(entity, "api", lim.name): lim for lim in API}
        limits |= {(entity, "budget", lim.name): lim for lim in BUDGET}
    return work, limits


SCENARIOS = {"one-item": one_item, "three-buckets": three_buckets}


async def run_ledger(
    table: TableRef, clock: FakeClock, scenario: str, faults: str, tasks: int, seed: int
) -> dict[str, Any]:
    admin = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    work, limits = await SCENARIOS[scenario](admin)
    async with fault_proxy(
        table.endpoint_url,
        seed=seed,
        rate=RATE,
        kinds=FAULTS[faults],
        delay_s=READ_TIMEOUT_S + 0.3,
        seconds=60,
    ) as proxy:
        repos = [
            await Repository.open(
                table=table.name,
                endpoint_url=proxy.url,
                region=table.region,
                clock=clock,
                client_config=Config(read_timeout=READ_TIMEOUT_S, connect_timeout=1),
            )
            for _ in range(PROCESSES)
        ]
        try:
            ledger = await run_tasks(
                [RateLimiter(r) for r in repos], work, tasks=tasks, calls=CALLS[tasks], seed=seed
            )
        finally:
            for repo in repos:
                await repo.close()
    wrong = await compare(admin, work, ledger, limits)
    await admin.close()
    return {"faults": proxy.faults, "ledger": ledger, "wrong": wrong}


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
@pytest.mark.parametrize(
    "tasks", [1, 8, pytest.param(32, marks=pytest.mark.slow)], ids=lambda t: f"{t}tasks"
)
@pytest.mark.parametrize("faults", list(FAULTS))
@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_every_bucket_matches_the_ledger(
    table: TableRef, clock: FakeClock, scenario: str, faults: str, tasks: int, seed: int
) -> None:
    result = await run_ledger(table, clock, scenario, faults, tasks, seed)
    ledger = result["ledger"]
    print(
        f"ledger {scenario} {faults} tasks={tasks} seed={seed}: faults={result['faults']} "
        f"admitted={ledger.admitted} refunded={ledger.refunded} mismatch={result['wrong']}"
    )
    assert result["faults"] > 0
    assert ledger.admitted > 0
    assert ledger.unavailable == 0, ledger.errors
    assert ledger.contended == 0
    assert result["wrong"] == {}
