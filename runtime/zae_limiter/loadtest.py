"""A load generator to point at a table of your own: `zae-limiter loadtest` (docs/performance.md).

Every run is bounded in time and in calls and stops by itself. It works in a namespace of its own
(`loadtest-<ms>`), registered on the table at the start and purged at the end, so it never
touches the table's other data. Each process opens its own `Repository` and runs `tasks`
concurrent loops of warm acquires; the parent adds the processes' results up.

Scenarios
  single   one entity per task, one resource with one limit no run can reach: the warm path.
  three    the seed call: a resource cascading to the organisation plus a per-user budget.
  hot-org  every task is a user of ONE organisation whose `units` limit is tight
           (`org_rate` per second, as much burst): throughput of a hot item, and the check
           that nothing was admitted above capacity + what refilled while the run lasted.
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import multiprocessing
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .errors import RateLimitExceeded, ValidationError, ZAELimiterError
from .gathering import gather_or_end
from .instrumentation import RequestEvent
from .limiter import RateLimiter
from .limits import Limit
from .repository import Repository

SCENARIOS = ("single", "three", "hot-org")
MAX_PROCESSES = 64
MAX_TASKS = 1024
MAX_DURATION_S = 3600.0
UNREACHABLE = 10**12  # a limit no load test reaches
READY_TIMEOUT_S = 300.0  # processes that are not all set up by then end the run
ORG = "lt-org"


class LoadTestFailed(ZAELimiterError):
    """A load-test process could not run (it died, or the processes were not all ready)."""


@dataclass(frozen=True)
class LoadSpec:
    """What to run. Bounds are checked by `validate` before anything is sent."""

    scenario: str = "single"
    processes: int = 1
    tasks: int = 8
    duration_s: float = 10.0
    max_calls: int = 100_000  # across all processes
    org_rate: int = 500  # hot-org: the organisation's units per second (and burst)
    table: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    allow_aws: bool = False


def is_loopback(endpoint_url: str | None) -> bool:
    """True for an endpoint on this machine (127.0.0.0/8, ::1, localhost)."""
    if not endpoint_url:
        return False
    host = urlsplit(endpoint_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def validate(spec: LoadSpec) -> None:
    """Refuse a spec out of bounds, or a non-loopback endpoint without `allow_aws`."""
    if spec.scenario not in SCENARIOS:
        raise ValidationError("scenario", spec.scenario, f"use one of {', '.join(SCENARIOS)}")
    for name, value, top in (
        ("processes", spec.processes, MAX_PROCESSES),
        ("tasks", spec.tasks, MAX_TASKS),
    ):
        if not 1 <= value <= top:
            raise ValidationError(name, value, f"give 1 to {top}")
    if not 0 < spec.duration_s <= MAX_DURATION_S:
        raise ValidationError(
            "duration", spec.duration_s, f"give more than 0 and at most {MAX_DURATION_S:g} seconds"
        )
    if spec.max_calls < 1:
        raise ValidationError("max_calls", spec.max_calls, "give at least 1")
    if spec.org_rate < 1:
        raise ValidationError("org_rate", spec.org_rate, "give at least 1 unit per second")
    if not spec.allow_aws and not is_loopback(spec.endpoint_url):
        raise ValidationError(
            "endpoint_url",
            spec.endpoint_url,
            "not on this machine; give a loopback endpoint (the one `zae-limiter local env` "
            "prints), or --i-mean-aws to send the load to AWS (it costs money)",
        )


# --- one process ---------------------------------------------------------------------------------


@dataclass
class ProcessResult:
    """What one process measured; the parent adds these up."""

    calls: int = 0
    admitted: int = 0
    rejected: int = 0
    units_admitted: int = 0  # the `units` debited by admitted calls, warm-up calls included
    errors: dict[str, int] = field(default_factory=dict)
    latencies_us: list[int] = field(default_factory=list)
    write_units: float = 0.0
    requests: int = 0
    first_start: float = math.inf  # wall clock (time.time) of the first call (warm-up too)
    last_end: float = 0.0
    loops_start: float = math.inf  # wall clock when the counted loops began


def _call(scenario: str, process: int, task: int) -> tuple[str, str, dict[str, Any]]:
    """(entity, resource, acquire keyword arguments) of one task's calls."""
    entity = f"lt-u{process}-{task}"
    if scenario == "single":
        return entity, "lt-single", {"consume": {"requests": 1}}
    if scenario == "three":
        return (
            entity,
            "lt-search",
            {"consume": {"requests": 1, "units": 100}, "also": {"lt-budget": {"weekly": 7_000}}},
        )
    return entity, "lt-search", {"consume": {"requests": 1, "units": 1}}


async def _entities(repo: Repository, spec: LoadSpec, process: int) -> None:
    limiter = RateLimiter(repo)
    for task in range(spec.tasks):
        entity, _, _ = _call(spec.scenario, process, task)
        parent = None if spec.scenario == "single" else ORG
        await limiter.create_entity(entity_id=entity, parent_id=parent)


async def _run_process(
    spec: LoadSpec, namespace: str, process: int, ready: Any, budget: int
) -> ProcessResult:
    result = ProcessResult()

    def listen(event: RequestEvent) -> None:
        result.requests += 1
        result.write_units += event.write_units or 0.0

    repo = await Repository.open(
        namespace, table=spec.table, endpoint_url=spec.endpoint_url, region=spec.region
    )
    try:
        await _entities(repo, spec, process)
        limiter = RateLimiter(repo)
        remaining = [budget]
        errors: Counter[str] = Counter()

        async def one(entity: str, resource: str, kwargs: dict[str, Any], *, counted: bool) -> None:
            began, began_wall = time.perf_counter_ns(), time.time()
            try:
                async with limiter.acquire(entity, resource, **kwargs):
                    pass
                result.units_admitted += kwargs["consume"].get("units", 0)
                if counted:
                    result.admitted += 1
            except RateLimitExceeded:
                result.rejected += counted
            except Exception as exc:  # counted and reported, never hidden
                errors[type(exc).__name__] += 1
            result.first_start = min(result.first_start, began_wall)
            result.last_end = max(result.last_end, time.time())
            if counted:
                result.calls += 1
                result.latencies_us.append((time.perf_counter_ns() - began) // 1000)

        async def loop(task: int) -> None:
            entity, resource, kwargs = _call(spec.scenario, process, task)
            while remaining[0] > 0 and time.time() < deadline:
                remaining[0] -= 1
                await one(entity, resource, kwargs, counted=True)

        # one warm-up call per task (not counted, but its units are: the limit saw them), so
        # the figures are the warm path's
        await gather_or_end(
            *(
                one(*_call(spec.scenario, process, task), counted=False)
                for task in range(spec.tasks)
            )
        )
        # every process starts its counted loops at the same moment
        await asyncio.to_thread(ready.wait, READY_TIMEOUT_S)
        result.loops_start = time.time()
        deadline = result.loops_start + spec.duration_s
        remove = repo.add_request_listener(listen)
        try:
            await gather_or_end(*(loop(task) for task in range(spec.tasks)))
        finally:
            remove()
        result.errors = dict(errors)
        return result
    finally:
        await repo.close()


def _process_main(
    spec: LoadSpec, namespace: str, process: int, ready: Any, budget: int
) -> dict[str, Any]:
    return asdict(asyncio.run(_run_process(spec, namespace, process, ready, budget)))


# --- setting up, running, adding up ---------------------------------------------------------------


async def _prepare(spec: LoadSpec, namespace: str) -> None:
    admin = await Repository.open(
        table=spec.table, endpoint_url=spec.endpoint_url, region=spec.region
    )
    try:
        await admin.register_namespace(namespace)
    finally:
        await admin.close()
    repo = await Repository.open(
        namespace, table=spec.table, endpoint_url=spec.endpoint_url, region=spec.region
    )
    try:
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults(
            "lt-single", [Limit.per_minute("requests", UNREACHABLE)]
        )
        await limiter.set_resource_defaults(
            "lt-search",
            [Limit.per_minute("requests", UNREACHABLE), Limit.per_minute("units", UNREACHABLE)],
        )
        await limiter.set_resource_defaults(
            "lt-budget", [Limit.quota("weekly", UNREACHABLE, cron="0 0 * * 1")]
        )
        if spec.scenario != "single":
            await limiter.create_entity(entity_id=ORG)
            await repo.set_resource_cascade("lt-search", True)
            org_limit = (
                Limit.per_second("units", spec.org_rate, burst=spec.org_rate)
                if spec.scenario == "hot-org"
                else Limit.per_day("units", UNREACHABLE)
            )
            await limiter.set_limits(ORG, [org_limit], resource="lt-search")
    finally:
        await repo.close()


async def _cleanup(spec: LoadSpec, namespace: str) -> None:
    admin = await Repository.open(
        table=spec.table, endpoint_url=spec.endpoint_url, region=spec.region
    )
    try:
        found = await admin.get_namespace(namespace)
        if found is not None:
            await admin.delete_namespace(namespace)
            await admin.purge_namespace(str(found["id"]))
    finally:
        await admin.close()


def percentile(values: list[int], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))])


def summarise(spec: LoadSpec, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's figures from every process's `ProcessResult` (as dicts)."""
    calls = sum(r["calls"] for r in results)
    admitted = sum(r["admitted"] for r in results)
    latencies = [v for r in results for v in r["latencies_us"]]
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
    last_end = max((r["last_end"] for r in results), default=0.0)
    elapsed = max(last_end - min(r["loops_start"] for r in results), 1e-9)  # counted loops
    spanned = max(last_end - min(r["first_start"] for r in results), 0.0)  # warm-up included
    summary: dict[str, Any] = {
        "scenario": spec.scenario,
        "processes": spec.processes,
        "tasks": spec.tasks,
        "duration_s": round(elapsed, 3),
        "calls": calls,
        "admitted": admitted,
        "rejected": sum(r["rejected"] for r in results),
        "errors": dict(errors),
        "calls_per_s": round(calls / elapsed, 1),
        "admitted_per_s": round(admitted / elapsed, 1),
        "p50_ms": percentile(latencies, 50) / 1000,
        "p90_ms": percentile(latencies, 90) / 1000,
        "p99_ms": percentile(latencies, 99) / 1000,
        "max_ms": percentile(latencies, 100) / 1000,
        "requests": sum(r["requests"] for r in results),
        "wcu_per_call": round(sum(r["write_units"] for r in results) / calls, 3) if calls else 0,
        "allowed": None,
        "over_admitted": 0,
    }
    if spec.scenario == "hot-org":
        # burst + what refilled from the first call (warm-up included) to the last
        allowed = spec.org_rate + math.floor(spec.org_rate * spanned)
        units = sum(r["units_admitted"] for r in results)
        summary.update(allowed=allowed, units_admitted=units, over_admitted=max(0, units - allowed))
    return summary


async def run(spec: LoadSpec) -> dict[str, Any]:
    """Run the load test described by `spec` and return its summary."""
    validate(spec)
    namespace = f"loadtest-{int(time.time() * 1000)}"
    await _prepare(spec, namespace)
    try:
        share, extra = divmod(spec.max_calls, spec.processes)
        budgets = [share + (1 if i < extra else 0) for i in range(spec.processes)]
        context = multiprocessing.get_context("spawn")
        with (
            context.Manager() as manager,
            ProcessPoolExecutor(spec.processes, mp_context=context) as pool,
        ):
            ready = manager.Barrier(spec.processes)
            futures = [
                pool.submit(_process_main, spec, namespace, i, ready, budgets[i])
                for i in range(spec.processes)
            ]
            try:
                results = await gather_or_end(*(asyncio.wrap_future(f) for f in futures))
            except ZAELimiterError:
                raise
            except Exception as exc:  # a dead process or a broken barrier
                raise LoadTestFailed(
                    f"a load-test process failed: {type(exc).__name__}: {exc}".rstrip(": ")
                ) from exc
    finally:
        await _cleanup(spec, namespace)
    return summarise(spec, list(results))
