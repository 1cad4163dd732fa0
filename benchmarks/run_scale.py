"""The scale phases of `python -m benchmarks.run` (docs/performance.md "How cost grows").

breakdown   warm single and three-bucket calls through a recording proxy: client, wire, engine;
resources   one acquire over 1, 2, 4, 8, 16 resources, ours and 0.17.0 alternating per count;
entities    entities met in steps 10 -> 10,000: cold cost per new entity, warm cost after;
hot_procs   one hot item, 1, 2, 4 processes x 32 tasks for a fixed time (one worker process
            per process, started at the same wall-clock moment);
hot_org     32 users per process x 4 processes under one organisation's per-day cap;
aggregator  ours only: one invocation per batch of 100 and 1,000 records, then the replay;
manifest    ours only: `limits apply` of 150 and 1,000 entities x 3 resources, then a no-change
            plan.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks import breakdown
from benchmarks.scale import RESOURCE_COUNTS, merge_shared

IMPLS = ("ours", "theirs")
PHASES = ("breakdown", "resources", "entities", "hot_procs", "hot_org", "aggregator", "manifest")


@dataclass(frozen=True)
class ScalePlan:
    breakdown_calls: int  # warm calls per case per implementation through the recording proxy
    block: int
    resource_counts: tuple[int, ...]  # resources per call
    resource_calls: int  # timed warm calls per resource count per implementation
    entity_levels: tuple[int, ...]
    theirs_entity_levels: tuple[int, ...]  # 0.17.0's cold start is slower: fewer steps
    entity_sample: int  # warm calls after each step (on a sample of the entities met)
    hot_processes: tuple[int, ...]
    tasks: int
    seconds: float
    org_processes: int
    org_cap: int
    aggregator_sizes: tuple[int, ...]
    manifest_entities: tuple[int, ...]  # one manifest per size, each on a fresh table


FULL_SCALE = ScalePlan(
    breakdown_calls=200,
    block=100,
    resource_counts=RESOURCE_COUNTS,
    resource_calls=30,
    entity_levels=(10, 100, 1_000, 10_000),
    theirs_entity_levels=(10, 100, 1_000),
    entity_sample=200,
    hot_processes=(1, 2, 4),
    tasks=32,
    seconds=5.0,
    org_processes=4,
    org_cap=600,
    aggregator_sizes=(100, 1_000),
    manifest_entities=(150, 1_000),
)
#: A smoke run: every phase, tiny (8 tasks, 2 processes at most, one batch size).
QUICK_SCALE = ScalePlan(
    breakdown_calls=20,
    block=10,
    resource_counts=(1, 16),
    resource_calls=5,
    entity_levels=(10, 50),
    theirs_entity_levels=(10, 50),
    entity_sample=10,
    hot_processes=(1, 2),
    tasks=8,
    seconds=1.0,
    org_processes=2,
    org_cap=60,
    aggregator_sizes=(30,),
    manifest_entities=(20,),
)

Workers = dict[str, Any]  # impl -> benchmarks.run.WorkerProcess
Spawn = Callable[[str], Any]  # impl -> a new WorkerProcess on the phase's engine


def alternate(number: int) -> tuple[str, ...]:
    return IMPLS if number % 2 == 0 else IMPLS[::-1]


def run_resources(workers: Workers, plan: ScalePlan, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, count in enumerate(plan.resource_counts):
        row: dict[str, Any] = {}
        for impl in alternate(number):
            try:
                row[impl] = workers[impl].call("resources", count=count, calls=plan.resource_calls)
            except RuntimeError as exc:  # 0.17.0 may refuse a shape: say so, go on
                row[impl] = {"error": str(exc).splitlines()[0][:300]}
            log(f"resources {count} {impl}: {_brief(row[impl], 'p50_us', 'wcu')}")
        out[str(count)] = row
    return out


def run_entities(workers: Workers, plan: ScalePlan, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for impl in IMPLS:
        levels = plan.entity_levels if impl == "ours" else plan.theirs_entity_levels
        out[impl] = workers[impl].call("entities", levels=list(levels), sample=plan.entity_sample)
        log(
            f"entities {impl}: "
            + ", ".join(
                f"{r['entities']}: cold {r['cold_requests_per_entity']:.1f} req, warm "
                f"{r['warm_requests_per_call']:.2f} req"
                for r in out[impl]
            )
        )
    return out


@contextmanager
def extra_workers(spawn: Spawn, impl: str, count: int) -> Iterator[list[Any]]:
    started: list[Any] = []
    try:
        for _ in range(count):
            started.append(spawn(impl))
        yield started
    finally:
        for worker in started:
            worker.close()


def shared_row(
    kind: str, workers: Workers, spawn: Spawn, impl: str, *, processes: int, plan: ScalePlan
) -> dict[str, Any]:
    """One shared run: a table set up by the main worker, `processes` workers on it at once."""
    setup = workers[impl].call(
        "shared_setup", kind=kind, processes=processes, tasks=plan.tasks, org_cap=plan.org_cap
    )
    with extra_workers(spawn, impl, processes - 1) as extra:
        team = [workers[impl], *extra]
        for worker in team:
            worker.call("info")  # every process imported and ready before the clock starts
        start_at = time.time() + 1.0
        for number, worker in enumerate(team):
            worker.send(
                "shared_run",
                kind=kind,
                table=setup["table"],
                process=number,
                tasks=plan.tasks,
                seconds=plan.seconds,
                start_at=start_at,
            )
        parts = [worker.receive("shared_run") for worker in team]
    row = merge_shared(kind, setup, parts, seconds=plan.seconds)
    if impl == "ours" and kind == "hot_item":
        row["shards"] = workers["ours"].call(
            "shards", table=setup["table"], entity="hot", resource="api"
        )
    return row


def run_hot_procs(
    workers: Workers, spawn: Spawn, plan: ScalePlan, log: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    turns = itertools.count()
    for processes in plan.hot_processes:
        out[str(processes)] = {}
        for impl in alternate(next(turns)):
            row = shared_row("hot_item", workers, spawn, impl, processes=processes, plan=plan)
            out[str(processes)][impl] = row
            log(
                f"hot item {processes} x {plan.tasks} {impl}: "
                f"{_brief(row, 'admitted_per_s', 'p99_us', 'shards')}"
            )
    return out


def run_hot_org(
    workers: Workers, spawn: Spawn, plan: ScalePlan, log: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for impl in IMPLS:
        row = shared_row("hot_org", workers, spawn, impl, processes=plan.org_processes, plan=plan)
        out[impl] = row
        log(
            f"hot org {plan.org_processes} x {plan.tasks} {impl}: "
            f"{_brief(row, 'admitted_with_warmup', 'allowed', 'over_admitted')}"
        )
    return out


def run_aggregator(
    workers: Workers, plan: ScalePlan, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = workers["ours"].call(
        "aggregator", sizes=list(plan.aggregator_sizes)
    )
    for row in rows:
        log(
            f"aggregator batch {row['batch']}: {row['first']['records_per_s']:.0f} records/s, "
            f"replay applied {row['replay']['applied']}"
        )
    return rows


def run_manifest(
    workers: Workers, plan: ScalePlan, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for entities in plan.manifest_entities:
        row: dict[str, Any] = workers["ours"].call("manifest", entities=entities)
        rows.append(row)
        if "error" in row:
            log(f"manifest {entities} x {row['resources']}: apply failed: {row['error']}")
        else:
            log(
                f"manifest {entities} x {row['resources']}: apply {row['apply']['requests']} "
                f"requests in {row['apply']['wall_s']:.1f} s; plan {row['plan']['requests']} "
                "requests"
            )
    return rows


def _brief(row: dict[str, Any], *keys: str) -> str:
    if "error" in row:
        return f"error {row['error']}"
    return ", ".join(
        f"{k} {row.get(k)}" if not isinstance(row.get(k), float) else f"{k} {row[k]:.1f}"
        for k in keys
    )


def phases(
    plan: ScalePlan, log: Callable[[str], None]
) -> dict[str, Callable[[Workers, Spawn], Any]]:
    """Phase name -> run(workers, spawn), in the order they run."""
    return {
        "breakdown": lambda w, s: breakdown.run_breakdown(
            w, s, s.endpoint_url, s.log_dir, calls=plan.breakdown_calls, block=plan.block, log=log
        ),
        "resources": lambda w, s: run_resources(w, plan, log),
        "entities": lambda w, s: run_entities(w, plan, log),
        "hot_procs": lambda w, s: run_hot_procs(w, s, plan, log),
        "hot_org": lambda w, s: run_hot_org(w, s, plan, log),
        "aggregator": lambda w, s: run_aggregator(w, plan, log),
        "manifest": lambda w, s: run_manifest(w, plan, log),
    }
