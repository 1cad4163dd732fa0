"""A recorded history of concurrency holds under kills and faults (tests/support/history/,
docs/concurrency.md): processes hold and give back leases against a small max_in_flight, some
are SIGKILLed with leases open, every write may meet a fault; the checker counts what was
certainly held at every instant (hold_checker.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from support.faultproxy import KINDS
from support.history.hold_checker import check_holds
from support.history.runner import Run, run_workers, worker_errors
from support.history.workload import Limits
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.dynamo import keys

CAP, TTL_S = 2, 2
HOLDS = Run(
    seed=32,
    processes=3,
    tasks=3,
    seconds=30,
    ops=1_000,
    limits=Limits(rpm=1, period_s=1),  # unused by the hold workload
    rate=0.2,
    kills=2,
    kill_window=(0.5, 0.8),  # once every process is under way (starting one takes seconds)
    kill_by="seconds",  # the hold worker logs holds, not invocations
    skew_ms=200,
    partitions=0,
    read_timeout=0.5,
    pause_s=0.1,
    rejection_cache_ttl=0.0,
    worker="support.history.hold_worker",
    extra=(("lease_ttl", TTL_S),),
)


async def held_after(repo: Repository) -> tuple[int, dict[str, int]]:
    key = keys.bucket(repo._ns, "u1", "llm", 0)
    response = await repo.transport.client.get_item(
        TableName=repo.table_name,
        Key={"PK": {"S": key["PK"]}, "SK": {"S": key["SK"]}},
        ConsistentRead=True,
    )
    limit = response["Item"]["L"]["M"]["parallel"]["M"]
    return int(limit["v"]["N"]), {k: int(v["N"]) for k, v in limit["h"]["M"].items()}


async def test_holds_never_exceed_max_in_flight_through_kills_and_faults(
    ddb_endpoint: str, tmp_path: Path
) -> None:
    table = f"holds-{HOLDS.seed}-{int(time.time())}"
    await Repository.create_table(table=table, endpoint_url=ddb_endpoint)
    admin = await Repository.open(table=table, endpoint_url=ddb_endpoint, rejection_cache_ttl=0)
    try:
        limiter = RateLimiter(admin)
        await limiter.set_resource_defaults(
            "llm", [Limit.concurrent("parallel", CAP, lease_ttl=TTL_S)]
        )
        ran = await asyncio.to_thread(run_workers, HOLDS, ddb_endpoint, table, tmp_path)
        checked = check_holds(ran.logs, CAP)
        operations = sum(checked.outcomes.values())
        print(f"holds history: {operations} operations {dict(checked.outcomes)}, "
              f"{ran.kills} kills, faults {dict(checked.faults)}")  # fmt: skip
        assert worker_errors(ran) == []
        assert checked.over == [] and checked.max_held == CAP  # the cap bound, and was reached
        assert ran.kills == 2 and checked.outcomes["refused"] > 0
        assert checked.outcomes["open at kill"] > 0  # killed processes left holds behind
        assert all(checked.faults[kind] > 0 for kind in KINDS), checked.faults
        # A new writer takes the whole cap once the holds left behind have lapsed: it sees
        # them on its first refused write and frees them a lease_ttl later.
        started, attempts = time.monotonic(), 0
        while True:
            attempts += 1
            try:
                async with limiter.acquire("u1", "llm", {"parallel": CAP}):
                    break
            except RateLimitExceeded:
                assert attempts < 40
                await asyncio.sleep(0.25)
        print(f"whole cap taken after {attempts} attempts, {time.monotonic() - started:.2f} s")
        total, entries = await held_after(admin)
        assert total == 0 and sum(entries.values()) == 0  # nothing left held
    finally:
        await admin.close()
