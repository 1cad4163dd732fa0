"""A recorded history of concurrency holds under kills and faults (tests/support/history/,
docs/concurrency.md): processes hold and give back leases against a small max_in_flight, some
are SIGKILLed with leases open, every write may meet a fault; the checker counts what was
certainly held at every instant (hold_checker.py)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from support.faultproxy import KINDS
from support.history.hold_checker import HoldHistory, check_holds
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
    kills=4,
    victims="holding",  # each kill takes a process with a lease open, so holds are left behind
    kill_span=(0.5, 0.8),  # once every process is under way (starting one takes seconds)
    kill_by="seconds",  # the hold worker logs holds, not invocations
    skew_ms=200,
    partitions=0,
    read_timeout=0.5,
    pause_s=0.1,
    rejection_cache_ttl=0.0,
    worker="support.history.hold_worker",
    extra=(("lease_ttl", TTL_S),),
)


#: The same with one 2 s network partition per process (a lease_ttl: a partitioned process's
#: holds lapse) early in each process's operations (2-15 % of the 300 it plans, which even a slow
#: machine starts within the 30 s), so that every partition falls inside the run.
PARTITIONED = replace(
    HOLDS, seed=33, ops=100, partitions=1, partition_s=2.0, partition_span=(0.02, 0.15)
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


def report(checked: HoldHistory, kills: int) -> None:
    """Operations, kills, faults, partitions, and the dead holds' recovery against its bound."""
    operations = sum(checked.outcomes.values())
    timed = [r for r in checked.recoveries if r.freed is not None and r.bound is not None]
    past_expiry = max((r.freed - r.expiry for r in timed if r.freed), default=0.0)
    before_bound = min((r.bound - r.freed for r in timed if r.bound and r.freed), default=0.0)
    print(f"holds history: {operations} operations {dict(checked.outcomes)}, {kills} kills, "
          f"faults {dict(checked.faults)}, {checked.partitions} partitions; "
          f"{len(checked.recoveries)} dead entries, {len(timed)} timed: freed at most "
          f"{past_expiry:.2f} s past their expiry, at least {before_bound:.2f} s before their "
          f"bound (lease_ttl + one write)")  # fmt: skip


@pytest.mark.parametrize("run", [HOLDS, PARTITIONED], ids=["faults", "partitions"])
async def test_holds_never_exceed_max_in_flight_through_kills_and_faults(
    ddb_endpoint: str, tmp_path: Path, run: Run
) -> None:
    table = f"holds-{run.seed}-{int(time.time())}"
    await Repository.create_table(table=table, endpoint_url=ddb_endpoint)
    admin = await Repository.open(table=table, endpoint_url=ddb_endpoint, rejection_cache_ttl=0)
    try:
        limiter = RateLimiter(admin)
        await limiter.set_resource_defaults(
            "llm", [Limit.concurrent("parallel", CAP, lease_ttl=TTL_S)]
        )
        ran = await asyncio.to_thread(run_workers, run, ddb_endpoint, table, tmp_path)
        checked = check_holds(ran.logs, CAP, TTL_S)
        report(checked, ran.kills)
        assert worker_errors(ran) == []
        assert checked.over == [] and checked.max_held == CAP  # the cap bound, and was reached
        assert ran.kills == run.kills and checked.outcomes["refused"] > 0
        assert checked.outcomes["open at kill"] > 0  # killed processes left holds behind
        assert all(checked.faults[kind] > 0 for kind in KINDS), checked.faults
        # Every entry a killed process left is gone from each write past its bound (an entry
        # with no write late enough to time it is freed by the whole-cap acquire below).
        assert checked.recoveries and [r for r in checked.recoveries if r.late] == []
        assert (checked.partitions > 0) == (run.partitions > 0)
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
