"""The callers of the overload phase, shared by both implementations (no import of either).

A *shape* is a table set up one way and a call made in a loop by `tasks` tasks for `seconds`:

- `org`: the hot organisation. 32 users of one organisation call
  `acquire(u, "search", consume={"rpm": 1}, also={"budget": {"units": 1}})`; search cascades to
  the organisation, whose own limit (100 a minute) binds (a user's own: 1,000 a minute);
- `hot`: one hot item, `acquire("hot", "api", consume={"rps": 1})` against 100 a second;
- `distinct`, `one_user` with case `single` (`api`, no limit reached) or `three` (the seed's
  three-bucket call, limits no loop reaches): each task on its own warm user, or all on one.

Every entity is warmed before the clock starts (a call consuming 0). A task calls again as soon
as its call is decided (a tight loop, as a busy service's callers do), or refused with a 429;
after a 503 it waits the `Retry-After` the integrations answer it with (`RETRY_AFTER_503_S`, as
an HTTP client of the service would), so that how fast a 503 is answered does not decide how
many there are. Each call's decision time
(entering `async with` to the lease or the exception) and outcome are recorded; beside them a
ticker measures the event loop's lag (how late a 5 ms sleep wakes, as in the outage phase).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from benchmarks.outage_calls import lag_ticker, percentile

ORG = "org-hot"
ORG_PER_MINUTE = 100
USERS = 32
HOT_PER_SECOND = 100
#: The `Retry-After` of a 503 (zae_limiter.integrations.headers.UNAVAILABLE_RETRY_SECONDS).
RETRY_AFTER_503_S = 1.0
SHAPES = ("org", "hot", "distinct", "one_user")
BIG = 10**12


class Shape:
    """One shape's entities and call, set up on a fresh table."""

    def __init__(self, name: str, case: str, tasks: int) -> None:
        self.name = name
        self.case = case
        self.tasks = tasks

    def entity(self, task: int) -> str:
        if self.name == "org":
            return f"u{task % USERS}"
        if self.name == "hot":
            return "hot"
        if self.name == "distinct":
            return f"d{task}"
        return "one"

    def entities(self) -> list[str]:
        return sorted({self.entity(task) for task in range(self.tasks)})

    def call(self, amount: int) -> tuple[str, dict[str, int], dict[str, dict[str, int]] | None]:
        """(resource, consume, also) of one call."""
        if self.name == "org" or (self.name != "hot" and self.case == "three"):
            return "search", {"rpm": amount}, {"budget": {"units": amount}}
        if self.name == "hot":
            return "api", {"rps": amount}, None
        return "api", {"rpm": amount}, None

    async def setup(self, limiter: Any, repo: Any) -> None:
        from zae_limiter import Limit

        if self.name == "hot":
            await limiter.set_resource_defaults("api", [Limit.per_second("rps", HOT_PER_SECOND)])
            return
        if self.name != "org" and self.case == "single":
            await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", BIG)])
            return
        binding = self.name == "org"
        await limiter.set_resource_defaults(
            "search", [Limit.per_minute("rpm", 1_000 if binding else BIG)]
        )
        await limiter.set_resource_defaults(
            "budget", [Limit.per_minute("units", 1_000 if binding else BIG)]
        )
        await limiter.create_entity(entity_id=ORG)
        for entity in self.entities():
            await limiter.create_entity(entity_id=entity, parent_id=ORG)
        await repo.set_resource_cascade("search", True)
        await repo.set_resource_cascade("budget", False)
        await limiter.set_limits(
            ORG, [Limit.per_minute("rpm", ORG_PER_MINUTE if binding else BIG)], resource="search"
        )

    async def warm(self, limiter: Any) -> None:
        """One call per entity (consuming 0), tried again while a capped table refuses it."""
        from zae_limiter import RateLimiterUnavailable

        resource, consume, also = self.call(0)
        for entity in self.entities():
            for _ in range(50):
                try:
                    async with limiter.acquire(entity, resource, consume=consume, also=also):
                        pass
                    break
                except RateLimiterUnavailable:
                    await asyncio.sleep(0.2)


async def run_calls(
    limiter: Any,
    shape: Shape,
    seconds: float,
    errors: tuple[type[BaseException], type[BaseException]],
) -> dict[str, Any]:
    """Every task calls in a loop for `seconds`. `errors`: (RateLimitExceeded,
    RateLimiterUnavailable) of the implementation. Times in seconds."""
    rejected_type, unavailable_type = errors
    resource, consume, also = shape.call(1)
    times: dict[str, list[float]] = {"admitted": [], "rejected": [], "unavailable": []}
    other: Counter[str] = Counter()
    lags: list[float] = []
    until = time.perf_counter() + seconds

    async def worker(task: int) -> None:
        entity = shape.entity(task)
        while time.perf_counter() < until:
            started = time.perf_counter()
            try:
                async with limiter.acquire(entity, resource, consume=consume, also=also) as lease:
                    decided = time.perf_counter() - started
                    kind = "unavailable" if getattr(lease, "degraded", False) else "admitted"
            except rejected_type:
                decided, kind = time.perf_counter() - started, "rejected"
            except unavailable_type:
                decided, kind = time.perf_counter() - started, "unavailable"
            except Exception as exc:  # counted and reported, never hidden
                other[type(exc).__name__] += 1
                continue
            times[kind].append(decided)
            # a caller answered without I/O must not hold the loop; a 503's waits its Retry-After
            await asyncio.sleep(RETRY_AFTER_503_S if kind == "unavailable" else 0)

    ticking = asyncio.ensure_future(lag_ticker(lags))
    wall0 = time.perf_counter()
    try:
        await asyncio.gather(*(worker(task) for task in range(shape.tasks)))
    finally:
        ticking.cancel()
    return {
        "times": times,
        "errors": dict(other),
        "lags": lags,
        "wall_s": time.perf_counter() - wall0,
    }


def summary(raw: dict[str, Any], deadline_s: float) -> dict[str, Any]:
    """A row's figures from `run_calls`' answer (ms, per second)."""
    times = raw["times"]
    every = [t for kind in times.values() for t in kind]
    ms = [1000 * t for t in every]
    lag_ms = [1000 * x for x in raw["lags"]]
    late_ms = [max(0.0, m - 1000 * deadline_s) for m in ms]  # how late past the deadline
    wall = raw["wall_s"]
    counts = {kind: len(values) for kind, values in times.items()}
    return {
        **counts,
        "errors": raw["errors"],
        "calls": len(every),
        "wall_s": round(wall, 2),
        "admitted_per_s": round(counts["admitted"] / wall, 1),
        "p50_ms": round(percentile(ms, 0.5), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms, default=0.0), 1),
        "past_deadline": sum(1 for m in late_ms if m > 0),
        "late_p99_ms": round(percentile(late_ms, 0.99), 1),
        "late_max_ms": round(max(late_ms, default=0.0), 1),
        "lag_p99_ms": round(percentile(lag_ms, 0.99), 1),
        "lag_max_ms": round(max(lag_ms, default=0.0), 1),
    }


class Side:
    """One implementation's rows, driven by the worker's ops `overload_setup` and
    `overload_run` (the runner reads the proxy's counts between them)."""

    def __init__(self) -> None:
        self.repo: Any = None
        self.limiter: Any = None
        self.shape: Shape | None = None

    async def setup(
        self, impl_name: str, upstream: str, url: str, shape: str, case: str, tasks: int
    ) -> None:
        from benchmarks.impls import make_impl
        from benchmarks.scenarios import new_table_name
        from zae_limiter import RateLimiter

        await self.close()
        direct = make_impl(impl_name, upstream)
        table = new_table_name(direct, f"ov-{shape}".replace("_", "-"))
        await direct.create_table(table)
        admin = await direct.open(table)  # set up on the engine, not through a proxy
        self.shape = Shape(shape, case, tasks)
        try:
            await self.shape.setup(RateLimiter(admin), admin)
        finally:
            await admin.close()
        self.repo = await make_impl(impl_name, url).open(table)
        self.limiter = RateLimiter(self.repo)
        await self.shape.warm(self.limiter)
        if url != upstream:
            await asyncio.sleep(1.0)  # a capped table's writes refill

    async def run(self, seconds: float, recorder: Any) -> dict[str, Any]:
        from zae_limiter import RateLimiterUnavailable, RateLimitExceeded

        assert self.shape is not None
        before = _stats(self.repo)
        with recorder.block() as block:
            raw = await run_calls(
                self.limiter, self.shape, seconds, (RateLimitExceeded, RateLimiterUnavailable)
            )
        after = _stats(self.repo)
        row = summary(raw, 1.0)
        writes = sum(1 for r in block.requests if r.operation in _WRITES)
        throttled = sum(
            1 for r in block.requests if r.operation in _WRITES and r.error_code in _THROTTLES
        )
        decided = row["admitted"] + row["rejected"]
        row["write_requests"] = writes
        row["throttled_requests"] = throttled
        writes -= throttled  # the table spent nothing on those
        row["writes_per_decided"] = round(writes / decided, 2) if decided else None
        row["stats"] = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], int)}
        return row

    async def close(self) -> None:
        if self.repo is not None:
            await self.repo.close()
            self.repo = None


_WRITES = ("UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")
_THROTTLES = ("ProvisionedThroughputExceededException", "ThrottlingException")


def _stats(repo: Any) -> dict[str, Any]:
    stats = repo.get_cache_stats()
    as_dict = getattr(stats, "as_dict", None)
    if as_dict is not None:
        return dict(as_dict())
    return {k: v for k, v in vars(stats).items() if isinstance(v, int)}
