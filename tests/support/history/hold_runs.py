"""Concurrency-hold histories (hold_worker, hold_checker): the plans, one run checked, and its
report. `tests/histories/test_hold_histories.py` runs `HOLDS` and `PARTITIONED`; `make soak
SOAK_ARGS=--holds` runs `LARGE_HOLDS` and writes its report to benchmarks/results/.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from support.history.hold_checker import HoldHistory, check_holds
from support.history.report import counts, settings
from support.history.runner import Ran, Run, run_workers, worker_errors
from support.history.workload import Limits
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, RateLimitExceeded, Repository
from zae_limiter.dynamo import keys

ENTITY, RESOURCE, LIMIT = "u1", "llm", "parallel"
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
#: The large one (`make soak SOAK_ARGS=--holds`): 4 processes x 16 tasks for 300 s, each
#: fault kind on 10 % of writes, 3 partitions of a lease_ttl per process within its first
#: 2,000 operations, 8 kills of processes holding leases, clocks up to 500 ms off.
LARGE_HOLDS = replace(
    HOLDS,
    seed=39,
    processes=4,
    tasks=16,
    seconds=300,
    ops=10_000,
    rate=0.4,
    kills=8,
    kill_span=(0.1, 0.9),
    skew_ms=500,
    partitions=3,
    partition_s=2.0,
    partition_span=(0.0, 2_000 / (16 * 10_000)),
)


@dataclass
class HoldRun:
    ran: Ran
    checked: HoldHistory
    errors: list[str]
    #: after the run: attempts a new writer took to hold the whole cap, and what stays held
    attempts: int = 0
    left_total: int = -1
    left_entries: int = -1

    @property
    def problems(self) -> list[str]:
        c = self.checked
        out = [f"{len(c.over)} instants over {CAP} held (first {c.over[:3]})"] if c.over else []
        late = [r for r in c.recoveries if r.late]
        out += [f"dead entry {r.key} freed late ({r.freed} > bound {r.bound})" for r in late]
        if self.left_total or self.left_entries:
            out.append(f"left held after the run: total {self.left_total}, entries "
                       f"{self.left_entries}")  # fmt: skip
        return out + self.errors


async def take_the_cap(limiter: RateLimiter, cap: int, attempts: int = 40) -> int:
    """Take all `cap` units of the limit, one a call, holding them together, then give them
    back; the attempts it took. One unit a call, because a call takes at most one shard's share
    of a split bucket (a refused unit moves to another shard); every unit taken is a writer that
    sees the holds left behind and frees them a lease_ttl after that first sighting. A unit
    that never comes back (a slot leaked) leaves the cap short after `attempts`."""
    tried = 0
    async with AsyncExitStack() as leases:
        taken = 0
        while taken < cap and tried < attempts:
            tried += 1
            try:
                await leases.enter_async_context(limiter.acquire(ENTITY, RESOURCE, {LIMIT: 1}))
                taken += 1
            except (RateLimitExceeded, RateLimiterUnavailable):
                await asyncio.sleep(0.25)
    return tried


async def hold_shards(repo: Repository) -> list[dict[str, Any]]:
    """The limit on every shard of its bucket (`v`, the entries `h`), read consistently (shard
    0 records the count)."""
    out: list[dict[str, Any]] = []
    count = 1
    while len(out) < count:
        item = await repo._store.get(keys.bucket(repo._ns, ENTITY, RESOURCE, len(out)))
        assert item is not None, f"the limit's item (shard {len(out)}) is gone"
        count = max(count, int(item.get("sc", 1)))
        out.append(item["L"][LIMIT])
    return out


async def held_after(repo: Repository) -> tuple[int, int]:
    """The limit's recorded total and the sum of its entries over every shard."""
    limits = await hold_shards(repo)
    return (sum(int(limit["v"]) for limit in limits),
            sum(int(v) for limit in limits for v in limit["h"].values()))  # fmt: skip


async def hold_history(run: Run, endpoint: str, workdir: Path) -> HoldRun:
    """A fresh table, the run's processes against it, the checker's verdicts, then a new writer
    takes the whole cap once the holds left behind lapse (it sees them on its first refused
    write and frees them a lease_ttl later) and gives it back: nothing may stay held."""
    table = f"holds-{run.seed}-{int(time.time())}"
    await Repository.create_table(table=table, endpoint_url=endpoint)
    admin = await Repository.open(table=table, endpoint_url=endpoint, rejection_cache_ttl=0)
    try:
        limiter = RateLimiter(admin)
        await limiter.set_resource_defaults(
            RESOURCE, [Limit.concurrent(LIMIT, CAP, lease_ttl=TTL_S)]
        )
        ran = await asyncio.to_thread(run_workers, run, endpoint, table, workdir)
        out = HoldRun(ran, check_holds(ran.logs, CAP, TTL_S), worker_errors(ran))
        out.attempts = await take_the_cap(limiter, CAP)
        out.left_total, out.left_entries = await held_after(admin)
    finally:
        await admin.close()
    return out


def summary(result: HoldRun) -> str:
    """Operations, kills, faults, partitions, and the dead holds' recovery against its bound."""
    checked = result.checked
    operations = sum(checked.outcomes.values())
    timed = [r for r in checked.recoveries if r.freed is not None and r.bound is not None]
    past_expiry = max((r.freed - r.expiry for r in timed if r.freed is not None), default=0.0)
    before_bound = min(
        (r.bound - r.freed for r in timed if r.bound is not None and r.freed is not None),
        default=0.0,
    )
    return (f"holds history: {operations} operations {dict(checked.outcomes)}, "
            f"{result.ran.kills} kills, faults {dict(checked.faults)}, {checked.partitions} "
            f"partitions; at most {checked.max_held} held at once (cap {CAP}), "
            f"{len(checked.over)} instants over; {len(checked.recoveries)} dead entries, "
            f"{len(timed)} timed: freed at most {past_expiry:.2f} s past their expiry, at least "
            f"{before_bound:.2f} s before their bound (lease_ttl + one write); whole cap taken "
            f"after {result.attempts} attempts")  # fmt: skip


def render_holds(result: HoldRun, *, title: str) -> str:
    """The report of a hold history as Markdown."""
    ran, checked = result.ran, result.checked
    problems = result.problems
    return "\n".join([
        f"# {title}",
        "",
        f"Seed {ran.run.seed}; {len(ran.workers)} worker processes ({ran.kills} killed with "
        f"SIGKILL while holding a lease, replaced by new writers), {ran.run.tasks} tasks each; "
        f"{ran.ended - ran.started:.0f} s; clock offsets "
        f"{sorted(w.offset_ms for w in ran.workers)} ms (spread {ran.skew_spread_ms} ms).",
        "",
        f"Settings: {settings(ran.run)}.",
        "",
        f"## Operations: {sum(checked.outcomes.values())}",
        "",
        *counts("Outcome", "Operations", checked.outcomes),
        "",
        f"## Faults injected: {sum(checked.faults.values())}; partitions opened: "
        f"{checked.partitions}",
        "",
        *counts("Kind", "Requests", checked.faults),
        "",
        "## Verdicts",
        "",
        summary(result) + ".",
        "",
        f"Left held after the run: total {result.left_total}, entries {result.left_entries}.",
        "",
        "Violations: none." if not problems else "Violations:",
        *(f"- {p}" for p in problems),
        "",
    ])  # fmt: skip
