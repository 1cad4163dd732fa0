"""Histories across three simulated Regions of an MRSC global table (docs/multi-region.md).

The history of `soak.py` (processes, every fault kind, partitions, kills, clock skew, the same
workload and checker) with each process in one of three Regions (tests/support/regions.py:
their own round trips, no transactions, no TTL, conflicts between Regions), a global budget
(`usd` a quota, reset only on 1 January) and one Region cut off from the others for a while.
Besides the checker's verdicts, a run must send no transaction: the simulated Regions refuse
them and count every one.

`SMALL_REGIONS` is tests/histories/test_region_histories.py (part of `make test`);
`LARGE_REGIONS` is `make soak SOAK_ARGS=--regions` (report soak-regions-<date>.md).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from support.history.checker import Checked, check
from support.history.report import render
from support.history.runner import Ran, Run, run_workers, worker_errors
from support.history.workload import Limits, set_up
from support.regions import DEFAULT_REGIONS, Regions, regions
from zae_limiter import Repository

SMALL_REGIONS = Run(
    seed=47,
    processes=3,
    tasks=3,
    seconds=300,
    ops=10,
    limits=Limits(rpm=4, period_s=20, budget_quota=60),
    kills=1,
    partitions=1,
    partition_s=1.5,
    pause_s=0.02,
    regions=DEFAULT_REGIONS,
)
#: The large run: 6 processes (two a Region) x 32 tasks x 110 operations, with replacements
#: (>= 20,000 operations), every fault kind at 10 %, 4 partitions a process, 3 kills, 500 ms
#: skew, a global budget, a Region cut off for 10 s. 32 tasks and a 2 s read timeout: with 96
#: tasks a process on 2 cores at load 20, reads waited past 1 s, the retries spent the clients'
#: retry budgets and 94 % of the operations ended RateLimiterUnavailable (26,756 operations, 0
#: violations, but little admitted to check).
LARGE_REGIONS = replace(
    SMALL_REGIONS,
    seed=4747,
    processes=6,
    tasks=32,
    seconds=2_400,
    ops=110,
    limits=Limits(rpm=30, period_s=60, budget_quota=6_000),
    kills=3,
    partitions=4,
    partition_s=2.5,
    read_timeout=2.0,
    pause_s=0.2,
)


@dataclass
class RegionRun:
    """A checked history across Regions, with what the simulated Regions saw."""

    ran: Ran
    checked: Checked
    counts: dict[str, Counter[str]]
    cut: tuple[str, float, float] | None  # Region, seconds into the run, for how long
    problems: list[str] = field(default_factory=list)


async def region_history(
    run: Run, endpoint: str, workdir: Path, *, scale: float = 1.0, cut_s: float = 10.0
) -> RegionRun:
    """A fresh table through three simulated Regions, the run's processes in them, one Region
    cut off once the workers have started a drawn share of the run's operations, then the
    checker's verdicts; problems include any transaction sent."""
    rng = random.Random(f"{run.seed}/regions")
    victim = rng.choice(run.regions)
    share = rng.uniform(0.3, 0.6)
    async with regions(endpoint, names=run.regions, seed=run.seed, scale=scale) as sim:
        table = f"regions-{run.seed}-{int(time.time())}"
        first = run.regions[0]
        await Repository.create_table(table=table, endpoint_url=sim.url(first), region=first)
        admin = await Repository.open(table=table, endpoint_url=sim.url(first), region=first)
        try:
            await set_up(admin, run.limits)
            started = time.time()
            cutter = asyncio.create_task(_cut_later(sim, victim, share, run, workdir, cut_s))
            urls = {name: sim.url(name) for name in run.regions}
            ran = await asyncio.to_thread(run_workers, run, urls, table, workdir)
            cut_at = cutter.result() if cutter.done() else None
            cutter.cancel()
            checked = await check(ran, admin, run.limits)
            checked.errors = worker_errors(ran)
        finally:
            await admin.close()
        counts = {name: Counter(sim.counts[name]) for name in sim.names}
    cut = None if cut_at is None else (victim, cut_at - started, cut_s)
    result = RegionRun(ran, checked, counts, cut)
    result.problems = list(checked.problems)
    sent = sum(c["transaction"] for c in counts.values())
    if sent:
        result.problems.append(f"{sent} transactions were sent (an MRSC table refuses them)")
    if cut is None:
        result.problems.append("the Region was never cut off (the run ended first)")
    return result


async def _cut_later(
    sim: Regions, victim: str, share: float, run: Run, workdir: Path, seconds: float
) -> float:
    """Cut `victim` off once the workers have started `share` of the run's operations."""
    planned = run.processes * run.tasks * run.ops
    while True:
        invoked = sum(path.read_bytes().count(b'"e":"invoke"') for path in workdir.glob("*.jsonl"))
        if invoked >= share * planned:
            sim.cut(victim, seconds)
            return time.time()
        await asyncio.sleep(0.2)


def render_regions(result: RegionRun, *, title: str) -> str:
    """The history's report, with what each Region saw."""
    text = render(result.ran, result.checked, title=title)
    rows = [
        "## Regions",
        "",
        "Requests through each simulated Region's endpoint (after the processes' fault "
        "proxies), conflicts between Regions (refused, retried at once), transactions refused "
        "(there must be none), writes dropped while cut off.",
        "",
        "| Region | Requests | Writes | Conflicts | Transactions | Dropped while cut off |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, counts in result.counts.items():
        writes = sum(counts[op] for op in ("UpdateItem", "PutItem", "DeleteItem"))
        requests = sum(v for k, v in counts.items() if k[0].isupper())
        rows.append(
            f"| {name} | {requests} | {writes} | {counts['conflict']} | "
            f"{counts['transaction']} | {counts['cut']} |"
        )
    if result.cut is not None:
        region, at, seconds = result.cut
        rows += ["", f"{region} was cut off {at:.0f} s into the run for {seconds:.0f} s."]
    extra = [f"- {p}" for p in result.problems if p not in result.checked.problems]
    return text + "\n" + "\n".join(rows) + "\n" + ("\n" + "\n".join(extra) + "\n" if extra else "")
