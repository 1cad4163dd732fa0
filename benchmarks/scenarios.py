"""The workloads, written once against the API both implementations share.

Imported by the worker under either library (see benchmarks/__init__.py), and by the smoke test
in tests/ for ours. `recorder` is a `tests/support/wire.py` WireRecorder already attached to every
DynamoDB client (its `install()`), so `with recorder.block() as w:` counts what a call sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.impls import Impl
from zae_limiter import Limit, RateLimiter, RateLimitExceeded

_table_numbers = itertools.count(1)


def new_table_name(impl: Impl, purpose: str) -> str:
    """Letters, digits and hyphens only: 0.17.0 uses the table name as a stack name."""
    return f"bench-{impl.name}-{purpose}-{next(_table_numbers)}-{int(time.time() * 1000) % 10**8}"


class Tables:
    """Fresh tables and the repositories opened on them; closes them all at the end."""

    def __init__(self, impl: Impl) -> None:
        self.impl = impl
        self._repos: list[Any] = []

    async def fresh(self, purpose: str, **open_kwargs: Any) -> tuple[str, Any, RateLimiter]:
        table = new_table_name(self.impl, purpose)
        await self.impl.create_table(table)
        repo, limiter = await self.open(table, **open_kwargs)
        return table, repo, limiter

    async def open(self, table: str, **open_kwargs: Any) -> tuple[Any, RateLimiter]:
        repo = await self.impl.open(table, **open_kwargs)
        self._repos.append(repo)
        return repo, RateLimiter(repo)

    async def close(self) -> None:
        for repo in reversed(self._repos):
            with contextlib.suppress(Exception):
                await repo.close()
        self._repos.clear()


# --- the seed pages' configuration -----------------------------------------------------------


@dataclass(frozen=True)
class SeedLimits:
    """Search cascading to the organisation (which declares only `units`), budget per user."""

    requests_per_minute: int = 60
    units_per_minute: int = 10_000
    weekly: int = 5_000_000
    org_units_per_day: int = 1_000_000
    org_weekly: int = 500_000_000


SEED = SeedLimits()
#: The same shape with limits no timing loop can reach.
UNREACHABLE = SeedLimits(10**12, 10**14, 10**15, 10**15, 10**15)
WEEKLY_CRON = "0 0 * * 1"
ORG = "org-acme"
CALL: dict[str, Any] = {
    "consume": {"requests": 1, "units": 100},
    "also": {"budget": {"weekly": 7_000}},
}


async def seed_setup(
    limiter: RateLimiter,
    repo: Any,
    limits: SeedLimits = SEED,
    *,
    org_budget: bool = False,
    users: tuple[str, ...] = ("user-3",),
) -> None:
    await limiter.set_resource_defaults(
        "search",
        [
            Limit.per_minute("requests", limits.requests_per_minute),
            Limit.per_minute("units", limits.units_per_minute),
        ],
    )
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", limits.weekly, cron=WEEKLY_CRON)]
    )
    await limiter.create_entity(entity_id=ORG)
    for user in users:
        await limiter.create_entity(entity_id=user, parent_id=ORG)
    await repo.set_resource_cascade("search", True)
    await repo.set_resource_cascade("budget", org_budget)
    await limiter.set_limits(
        ORG, [Limit.per_day("units", limits.org_units_per_day)], resource="search"
    )
    if org_budget:
        await limiter.set_limits(
            ORG, [Limit.quota("weekly", limits.org_weekly, cron=WEEKLY_CRON)], resource="budget"
        )


# --- calls -------------------------------------------------------------------------------------

Outcome = str  # "admitted", "rejected", "exit" or "error: ..."


async def acquire_once(
    limiter: RateLimiter,
    entity: str,
    resource: str,
    consume: dict[str, int],
    also: dict[str, dict[str, int]] | None = None,
) -> Outcome:
    async with limiter.acquire(entity, resource, consume=consume, also=also):
        pass
    return "admitted"


async def exit_ok(acquisition: Any) -> Outcome:
    await acquisition.__aexit__(None, None, None)
    return "exit"


async def exit_with_error(acquisition: Any) -> Outcome:
    error = RuntimeError("work failed")
    with contextlib.suppress(RuntimeError):
        await acquisition.__aexit__(RuntimeError, error, None)
    return "exit"


def wire_summary(block: Any, *, with_round_trips: bool = True) -> dict[str, Any]:
    return {
        "requests": len(block.requests),
        **({"round_trips": block.round_trips} if with_round_trips else {}),
        "rcu": block.rcu,
        "wcu": block.wcu,
        "index_wcu": block.index_wcu,
        "by_operation": block.by_operation,
        "failures": [r.error_code or r.transport_error for r in block.failures],
    }


async def measure(recorder: Any, call: Callable[[], Awaitable[Outcome]]) -> dict[str, Any]:
    """What one call cost on the wire, and how it ended."""
    with recorder.block() as block:
        try:
            outcome = await call()
        except RateLimitExceeded:
            outcome = "rejected"
        except Exception as exc:  # reported, not raised: one broken row must not hide the rest
            outcome = f"error: {type(exc).__name__}: {exc}"[:300]
    return {"outcome": outcome, **wire_summary(block)}


class Entered:
    """`acquire()` entered by hand, so that its enter and its exit are measured apart."""

    def __init__(self, limiter: RateLimiter, entity: str, resource: str, **kwargs: Any) -> None:
        self.acquisition: Any = limiter.acquire(entity, resource, **kwargs)
        self.lease: Any = None

    async def enter(self) -> Outcome:
        self.lease = await self.acquisition.__aenter__()
        return "admitted"


# --- cost rows (benchmarks/targets.py names them) ----------------------------------------------


async def seed_costs(tables: Tables, recorder: Any) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    _, repo, limiter = await tables.fresh("seed")
    await seed_setup(limiter, repo)
    rows["seed.first"] = await measure(
        recorder, lambda: acquire_once(limiter, "user-3", "search", **CALL)
    )
    entered = Entered(limiter, "user-3", "search", **CALL)
    rows["seed.admit"] = await measure(recorder, entered.enter)
    if entered.lease is not None:
        await entered.lease.adjust(units=40)
        await entered.lease.resource("budget").adjust(weekly=2_000)
        rows["seed.reconcile"] = await measure(recorder, lambda: exit_ok(entered.acquisition))
    rows["seed.exact"] = await measure(
        recorder, lambda: acquire_once(limiter, "user-3", "search", **CALL)
    )

    _, repo, limiter = await tables.fresh("org")
    await seed_setup(limiter, repo, org_budget=True)
    await acquire_once(limiter, "user-3", "search", **CALL)
    entered = Entered(limiter, "user-3", "search", **CALL)
    rows["org.admit"] = await measure(recorder, entered.enter)
    if entered.lease is not None:
        await entered.lease.adjust(units=40)
        await entered.lease.resource("budget").adjust(weekly=2_000)
        rows["org.reconcile"] = await measure(recorder, lambda: exit_ok(entered.acquisition))
    return rows


async def rejection_costs(tables: Tables, recorder: Any) -> dict[str, Any]:
    """The seed call against a user budget with 3,000 left after one call (7,000 each)."""
    rows: dict[str, Any] = {}
    table, repo, cold = await tables.fresh("reject", rejection_cache_ttl=0)
    await seed_setup(cold, repo)
    await cold.set_limits(
        "user-3", [Limit.quota("weekly", 10_000, cron=WEEKLY_CRON)], resource="budget"
    )
    await acquire_once(cold, "user-3", "search", **CALL)
    # No rejection cache: the process writes, the budget's write fails, the others are refunded.
    rows["seed.reject_cold"] = await measure(
        recorder, lambda: acquire_once(cold, "user-3", "search", **CALL)
    )
    _, cached = await tables.open(table)
    with contextlib.suppress(RateLimitExceeded):
        await acquire_once(cached, "user-3", "search", **CALL)  # teaches the rejection cache
    rows["seed.reject_cached"] = await measure(
        recorder, lambda: acquire_once(cached, "user-3", "search", **CALL)
    )
    return rows


async def single_resource_costs(tables: Tables, recorder: Any) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    table, repo, limiter = await tables.fresh("single")
    await limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 10_000)])

    def one(amount: int = 1) -> Callable[[], Awaitable[Outcome]]:
        return lambda: acquire_once(limiter, "u1", "api", {"tokens": amount})

    rows["single.first"] = await measure(recorder, one())
    rows["single.admit"] = await measure(recorder, one())

    entered = Entered(limiter, "u1", "api", consume={"tokens": 5})
    await entered.enter()
    await entered.lease.adjust(tokens=3)
    rows["single.reconcile"] = await measure(recorder, lambda: exit_ok(entered.acquisition))

    entered = Entered(limiter, "u1", "api", consume={"tokens": 5})
    await entered.enter()
    await entered.lease.adjust(tokens=2)
    await entered.lease.adjust(tokens=-2)
    rows["single.no_change"] = await measure(recorder, lambda: exit_ok(entered.acquisition))

    entered = Entered(limiter, "u1", "api", consume={"tokens": 5})
    await entered.enter()
    rows["single.refund"] = await measure(recorder, lambda: exit_with_error(entered.acquisition))

    entered = Entered(limiter, "u1", "api", consume={"tokens": 5})
    await entered.enter()

    async def consume_more() -> Outcome:
        await entered.lease.consume(tokens=5)
        return "exit"

    rows["single.consume"] = await measure(recorder, consume_more)
    await exit_ok(entered.acquisition)

    await limiter.set_resource_defaults("casc", [Limit.per_minute("tokens", 10_000)])
    await repo.set_resource_cascade("casc", True)
    await limiter.create_entity(entity_id="p1")
    await limiter.create_entity(entity_id="c1", parent_id="p1")
    await limiter.set_limits("p1", [Limit.per_minute("tokens", 100_000)], resource="casc")
    await acquire_once(limiter, "c1", "casc", {"tokens": 1})
    rows["single.cascade_admit"] = await measure(
        recorder, lambda: acquire_once(limiter, "c1", "casc", {"tokens": 1})
    )

    # Another process took the last token: this one's image still shows one left, so it writes.
    await limiter.set_resource_defaults("tiny", [Limit.per_minute("rpm", 2)])
    _, cold = await tables.open(table, rejection_cache_ttl=0)
    _, other = await tables.open(table)
    await acquire_once(cold, "u1", "tiny", {"rpm": 1})
    await acquire_once(other, "u1", "tiny", {"rpm": 1})
    rows["single.reject_cold"] = await measure(
        recorder, lambda: acquire_once(cold, "u1", "tiny", {"rpm": 1})
    )
    return rows


COST_GROUPS = (seed_costs, rejection_costs, single_resource_costs)


async def all_costs(impl: Impl, recorder: Any) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for group in COST_GROUPS:
        tables = Tables(impl)
        try:
            rows.update(await group(tables, recorder))
        except Exception as exc:  # a group that cannot even be set up: say so, go on
            rows[f"{group.__name__}.setup_error"] = f"{type(exc).__name__}: {exc}"[:500]
        finally:
            await tables.close()
    return rows


# --- sequential timing: latency and client CPU per call ---------------------------------------

TIMING_CASES = ("single", "three")
TIMING_ENTITIES = 8


def timing_sample(
    latencies_us: list[int], cpu_s: float, wall_s: float, outcomes: Counter[str]
) -> dict[str, Any]:
    return {"lat_us": latencies_us, "cpu_s": cpu_s, "wall_s": wall_s, "outcomes": dict(outcomes)}


async def timed_loop(call: Callable[[int], Awaitable[Any]], n: int) -> dict[str, Any]:
    """n sequential calls: each one's wall time, and this process's CPU time for all of them."""
    latencies: list[int] = []
    outcomes: Counter[str] = Counter()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter_ns()
        try:
            await call(i)
            outcomes["ok"] += 1
        except RateLimitExceeded:
            outcomes["rejected"] += 1
        latencies.append((time.perf_counter_ns() - t0) // 1000)
    return timing_sample(
        latencies, time.process_time() - cpu0, time.perf_counter() - wall0, outcomes
    )


class TimingBench:
    """Warm single-resource acquires and the seed page's three-bucket acquire, on one table.

    Entities rotate over TIMING_ENTITIES users (all warmed first), with limits no loop reaches.
    """

    def __init__(self, impl: Impl) -> None:
        self.impl = impl
        self.tables = Tables(impl)
        self.repo: Any = None
        self.limiter: Any = None
        self.singles = tuple(f"lat-u{i}" for i in range(TIMING_ENTITIES))
        self.users = tuple(f"lat-s{i}" for i in range(TIMING_ENTITIES))
        self.floor: dict[str, list[dict[str, Any]]] = {}

    async def setup(self, warm_rounds: int) -> None:
        _, self.repo, self.limiter = await self.tables.fresh("timing")
        await self.limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 10**12)])
        await seed_setup(self.limiter, self.repo, UNREACHABLE, users=self.users)
        for case in TIMING_CASES:
            await timed_loop(self.caller(case), warm_rounds * TIMING_ENTITIES)

    def caller(self, case: str) -> Callable[[int], Awaitable[Any]]:
        limiter = self.limiter
        if case == "single":
            singles = self.singles

            async def single(i: int) -> None:
                async with limiter.acquire(
                    singles[i % TIMING_ENTITIES], "api", consume={"tokens": 1}
                ):
                    pass

            return single
        if case == "three":
            users = self.users

            async def three(i: int) -> None:
                async with limiter.acquire(users[i % TIMING_ENTITIES], "search", **CALL):
                    pass

            return three
        raise ValueError(f"unknown timing case {case!r}")

    async def block(self, case: str, n: int) -> dict[str, Any]:
        return await timed_loop(self.caller(case), n)

    # --- the transport floor -------------------------------------------------------------

    async def setup_floor(self, recorder: Any) -> dict[str, Any]:
        """Capture each case's warm writes, and copy the items they touch to floor keys."""
        client = await self.impl.client(self.repo)
        shown: dict[str, Any] = {}
        for case in TIMING_CASES:
            with recorder.block() as block:
                await self.caller(case)(0)
            self.floor[case] = [
                await floor_request(client, request.params)
                for request in block.requests
                if request.operation == "UpdateItem"
            ]
            shown[case] = {
                "operations": block.by_operation,
                "replayed_update_items": len(self.floor[case]),
            }
        return shown

    async def floor_block(self, case: str, n: int) -> dict[str, Any]:
        client = await self.impl.client(self.repo)
        requests = self.floor[case]
        if len(requests) == 1:
            (request,) = requests

            async def call(_: int) -> None:
                await client.update_item(**request)
        else:

            async def call(_: int) -> None:
                await asyncio.gather(*(client.update_item(**r) for r in requests))

        return await timed_loop(call, n)

    async def close(self) -> None:
        await self.tables.close()


_NAME = re.compile(r"#\w+")
_VALUE = re.compile(r":\w+")
FLOOR_SUFFIX = "#floor"


async def floor_request(client: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The limiter's UpdateItem, aimed at a copy of its item and made to always pass.

    Same update expression, values, item and ReturnValues; the condition is reduced to
    `attribute_exists` on the key (the limiter's own condition would fail on a replay), and
    names and values only that condition used are dropped (DynamoDB refuses unused ones).
    """
    table, key = params["TableName"], params["Key"]
    stored = await client.get_item(TableName=table, Key=key, ConsistentRead=True)
    floor_key = {
        name: ({"S": value["S"] + FLOOR_SUFFIX} if "S" in value else value)
        for name, value in key.items()
    }
    await client.put_item(TableName=table, Item={**stored.get("Item", {}), **floor_key})
    request = {
        k: v
        for k, v in params.items()
        if k not in ("ReturnConsumedCapacity", "ConditionExpression")
    }
    request["Key"] = floor_key
    request["ConditionExpression"] = "attribute_exists(#floorkey)"
    names = {**params.get("ExpressionAttributeNames", {}), "#floorkey": next(iter(key))}
    expressions = " ".join(
        str(request.get(k, "")) for k in ("UpdateExpression", "ConditionExpression")
    )
    used_names, used_values = set(_NAME.findall(expressions)), set(_VALUE.findall(expressions))
    request["ExpressionAttributeNames"] = {k: v for k, v in names.items() if k in used_names}
    values = {
        k: v for k, v in params.get("ExpressionAttributeValues", {}).items() if k in used_values
    }
    if values:
        request["ExpressionAttributeValues"] = values
    else:
        request.pop("ExpressionAttributeValues", None)
    return request


# --- contention ----------------------------------------------------------------------------------

CONTENTION_KINDS = ("distinct", "one_entity", "org_cap")
SECONDS_PER_DAY = 86_400


async def contention(
    impl: Impl, recorder: Any, kind: str, *, tasks: int, attempts: int, capacity: int
) -> dict[str, Any]:
    """`tasks` concurrent tasks, `attempts` acquires each, against a per-day cap of `capacity`.

    distinct: one entity per task, each capped; one_entity: every task on one capped entity;
    org_cap: one user per task under one organisation whose cap the resource cascades to.
    Allowed per capped bucket: capacity plus what refilled while the run lasted.
    """
    tables = Tables(impl)
    try:
        _, repo, limiter = await tables.fresh(f"c-{kind.replace('_', '-')}")
        if kind == "org_cap":
            resource, limit_name = "search", "units"
            await limiter.set_resource_defaults(resource, [Limit.per_day(limit_name, 10**12)])
            await limiter.create_entity(entity_id="org-c")
            entities = [f"m{i}" for i in range(tasks)]
            for entity in entities:
                await limiter.create_entity(entity_id=entity, parent_id="org-c")
            await repo.set_resource_cascade(resource, True)
            await limiter.set_limits(
                "org-c", [Limit.per_day(limit_name, capacity)], resource=resource
            )
        else:
            resource, limit_name = "calls", "calls"
            await limiter.set_resource_defaults(resource, [Limit.per_day(limit_name, capacity)])
            entities = [f"d{i}" for i in range(tasks)] if kind == "distinct" else ["hot"] * tasks
        admitted: Counter[str] = Counter()
        rejected = 0
        errors: Counter[str] = Counter()

        async def worker(entity: str) -> None:
            nonlocal rejected
            for _ in range(attempts):
                try:
                    async with limiter.acquire(entity, resource, consume={limit_name: 1}):
                        pass
                    admitted[entity] += 1
                except RateLimitExceeded:
                    rejected += 1
                except Exception as exc:
                    errors[type(exc).__name__] += 1

        with recorder.block() as block:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker(entity) for entity in entities))
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        allowed_each = math.floor(capacity * (1 + wall / SECONDS_PER_DAY))
        if kind == "distinct":
            allowed = allowed_each * tasks
            over = sum(max(0, n - allowed_each) for n in admitted.values())
        else:
            allowed = allowed_each
            over = max(0, sum(admitted.values()) - allowed_each)
        total_admitted = sum(admitted.values())
        attempts_total = tasks * attempts
        return {
            "kind": kind,
            "tasks": tasks,
            "attempts": attempts_total,
            "capacity": capacity,
            "admitted": total_admitted,
            "rejected": rejected,
            "errors": dict(errors),
            "allowed": allowed,
            "over_admitted": over,
            "wall_s": wall,
            "cpu_s": cpu,
            "calls_per_s": attempts_total / wall,
            "admitted_per_s": total_admitted / wall,
            **{f"wire_{k}": v for k, v in wire_summary(block, with_round_trips=False).items()},
        }
    finally:
        await tables.close()


HOT_TASKS = (1, 8, 32, 64)


async def counted_acquire(
    limiter: RateLimiter,
    entity: str,
    resource: str,
    consume: dict[str, int],
    outcomes: Counter[str],
    errors: Counter[str],
) -> None:
    """One acquire and release, counted as admitted or rejected, or its error by type."""
    try:
        async with limiter.acquire(entity, resource, consume=consume):
            pass
        outcomes["admitted"] += 1
    except RateLimitExceeded:
        outcomes["rejected"] += 1
    except Exception as exc:  # counted and reported, never hidden
        errors[type(exc).__name__] += 1


async def hot_item(impl: Impl, recorder: Any, *, tasks: int, seconds: float) -> dict[str, Any]:
    """`tasks` tasks acquiring 1 from one bucket far below its limit (10,000,000 per minute),
    with the real clock, for `seconds`: every call should be admitted."""
    tables = Tables(impl)
    try:
        _, _, limiter = await tables.fresh(f"hot-{tasks}")
        await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10_000_000)])
        async with limiter.acquire("hot", "api", consume={"rpm": 1}):
            pass  # the item exists before the clock starts
        outcomes: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        until = time.perf_counter() + seconds

        async def worker() -> None:
            while time.perf_counter() < until:
                await counted_acquire(limiter, "hot", "api", {"rpm": 1}, outcomes, errors)

        with recorder.block() as block:
            wall0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(tasks)))
            wall = time.perf_counter() - wall0
        admitted = outcomes["admitted"]
        return {
            "tasks": tasks,
            "admitted": admitted,
            "rejected": outcomes["rejected"],
            "errors": dict(errors),
            "wall_s": wall,
            "admitted_per_s": admitted / wall,
            **{f"wire_{k}": v for k, v in wire_summary(block, with_round_trips=False).items()},
        }
    finally:
        await tables.close()
