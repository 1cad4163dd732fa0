"""Outages of seconds to minutes on DynamoDB Local, as the tests and `make bench` run them
(docs/on-unavailable.md, "Outages of minutes"; docs/alerts.md, "Alerts only on consumption that
stays").

`lost_then_outage`: per combination of answers (*held* past the deadline, or *dropped* after
the write applied), mode (BLOCK, ALLOW) and call (*single*: one resource with a concurrency
limit; *seed*: the three-bucket call, a user's `search` cascading into its organisation plus a
`budget` with alert thresholds), `calls` acquires with a deadline run while the table lands
every write and loses its answer (a few of them cancelled by their callers); then the table
answers 500 to everything for `outage_s`; then it recovers and every repository closes. Then:
each bucket's consumption beside the ledger of admitted leases (the warm-up's), concurrency
slots still held, the alerts an aggregator stores once every hold has passed (every debit of
the fault was refunded, so any alert is spurious), and the repositories' counters.

`engine_killed`: a workload of users cascading into one organisation (a concurrency limit, a
budget with alert thresholds, the aggregator running) while the engine is SIGKILLed (its data
on disk) and started again after `down_s`. Then: the ledger of admitted leases against every
bucket, the organisation's total against its users', slots held, and alerts above the final use.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.config import Config

from support.outage import outage_proxy
from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
)
from zae_limiter.acquire.deadlines import DEFAULT

try:
    from zae_limiter.alerts.held import HOLD_MS
except ImportError:  # a tree before held crossings (benchmarks.outage_long measures it too)
    HOLD_MS = 0
from zae_limiter.local import start_engine
from zae_limiter.local.stream_runner import StreamRunner

REGION = "us-east-1"
TIMEOUTS = Config(connect_timeout=1, read_timeout=1)
ANSWERS = ("held", "dropped")
MODES = (OnUnavailable.BLOCK, OnUnavailable.ALLOW)
CALLS = ("single", "seed")
BUDGET = Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", alert_at=(1, 2))
#: The budget of `engine_killed`: 1,000 a call (2 %) crosses a threshold every few calls.
KILL_BUDGET = Limit.quota("weekly", 50_000, cron="0 0 * * 1", alert_at=(2, 5, 10, 20, 40))
Owed = Counter[tuple[str, str, str]]  # (entity, resource, limit) -> whole units


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Combo:
    """One combination of `lost_then_outage` and what it measured."""

    answers: str
    mode: OnUnavailable
    call: str
    outcomes: Counter[str] = field(default_factory=Counter)
    ledger: Owed = field(default_factory=Counter)  # what admitted leases owe
    close_s: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def entity(self) -> str:
        return f"{self.answers}-{self.mode.name.lower()}-{self.call}"


@dataclass
class Report:
    """What a shape left: units beyond the ledger per bucket limit (0 is exact), slots held,
    spurious alerts, the longest close(), and the combined counters."""

    left: dict[tuple[str, str, str], int]
    slots_held: int
    spurious_alerts: list[str]
    close_s: float
    counters: Counter[str]
    outcomes: Counter[str]
    extra: dict[str, Any] = field(default_factory=dict)


async def define(admin: Repository) -> None:
    """The limits both shapes use (the seed's three-bucket call, a concurrency limit)."""
    await admin.set_resource_defaults(
        "api", [Limit.per_minute("rpm", 1_000_000), Limit.concurrent("inflight", 1_000)]
    )
    await admin.set_resource_defaults(
        "search", [Limit.per_minute("requests", 100_000), Limit.per_minute("units", 10_000_000)]
    )
    await admin.set_resource_defaults("budget", [BUDGET])
    await admin.create_entity(entity_id="org-acme")
    await admin.set_resource_cascade("search", True)
    await admin.set_limits("org-acme", [Limit.per_day("units", 1_000_000_000)], resource="search")


def call_of(call: str, entity: str) -> tuple[tuple[Any, ...], dict[str, Any], Owed]:
    """(args, kwargs, what one admitted lease owes with its adjustment of one unit)."""
    if call == "single":
        return (entity, "api", {"rpm": 1, "inflight": 1}), {}, Counter({(entity, "api", "rpm"): 2})
    owed = Counter(
        {
            (entity, "search", "requests"): 1,
            (entity, "search", "units"): 101,
            ("org-acme", "search", "units"): 101,
            (entity, "budget", "weekly"): 7_000,
        }
    )
    kwargs = {"also": {"budget": {"weekly": 7_000}}}
    return (entity, "search", {"requests": 1, "units": 100}), kwargs, owed


async def one_call(
    limiter: RateLimiter,
    combo: Combo,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    owed: Owed,
    timeout: Any = DEFAULT,
) -> None:
    """An acquire adjusting by one unit in its block, its outcome and ledger in `combo`."""
    adjust = {"rpm": 1} if combo.call == "single" else {"units": 1}
    try:
        call = {**kwargs, "on_unavailable": combo.mode, "timeout": timeout}
        async with limiter.acquire(*args, **call) as lease:
            if lease.degraded:
                combo.outcomes["degraded"] += 1
                return
            await lease.adjust(**adjust)
            combo.ledger.update(owed)  # the body completed: its exit lands
            combo.outcomes["admitted"] += 1
    except RateLimiterUnavailable:
        combo.outcomes["refused"] += 1
    except asyncio.CancelledError:
        combo.outcomes["cancelled"] += 1


async def lost_then_outage(
    endpoint: str,
    table: str,
    *,
    outage_s: float,
    calls: int,
    deadline: float | None,
    close_timeout: float | None = 60.0,
    at: Callable[[str], Awaitable[None]] | None = None,
) -> Report:
    """See the module docstring. `deadline` None: the repositories take the production
    default (the caller removes $ZAEL_ACQUIRE_TIMEOUT). `at(phase)` is awaited at each phase
    ("lost", "outage", "recovered") for the caller to watch."""
    admin = await Repository.open(table=table, endpoint_url=endpoint, region=REGION)
    await define(admin)
    combos = [Combo(a, m, c) for a in ANSWERS for m in MODES for c in CALLS]
    for combo in combos:
        parent = "org-acme" if combo.call == "seed" else None
        await admin.create_entity(entity_id=combo.entity, parent_id=parent)
    async with contextlib.AsyncExitStack() as stack:
        proxies = {a: await stack.enter_async_context(outage_proxy(endpoint)) for a in ANSWERS}
        repos = []
        for combo in combos:
            repos.append(
                await Repository.open(
                    table=table,
                    endpoint_url=proxies[combo.answers].url,
                    region=REGION,
                    client_config=TIMEOUTS,
                    acquire_timeout=DEFAULT if deadline is None else deadline,
                )
            )
        for combo, repo in zip(combos, repos, strict=True):  # warm: config read, items written
            args, kwargs, owed = call_of(combo.call, combo.entity)
            await one_call(RateLimiter(repo), combo, args, kwargs, owed, timeout=None)
        await _phase(at, "lost")
        await proxies["held"].set_mode("hold")
        await proxies["dropped"].set_mode("drop")
        tasks = []
        for combo, repo in zip(combos, repos, strict=True):
            args, kwargs, owed = call_of(combo.call, combo.entity)
            tasks += [
                asyncio.ensure_future(one_call(RateLimiter(repo), combo, args, kwargs, owed))
                for _ in range(calls)
            ]
        await asyncio.sleep(0.05)
        for task in tasks[:: max(1, calls // 2)]:  # a few callers give up early
            task.cancel()
        await asyncio.wait(tasks, timeout=120)  # a hang guard: each returns at its deadline
        await _phase(at, "outage")
        for proxy in proxies.values():
            await proxy.set_mode("error500")
        await asyncio.sleep(outage_s)
        for proxy in proxies.values():
            await proxy.set_mode("pass")
        await _phase(at, "recovered")
        for combo, repo in zip(combos, repos, strict=True):
            started = time.monotonic()
            await repo.close(timeout=close_timeout)
            combo.close_s = time.monotonic() - started
            combo.stats = repo.get_cache_stats().as_dict()
    report = await _judge(admin, combos)
    await admin.close()
    return report


async def _phase(at: Callable[[str], Awaitable[None]] | None, name: str) -> None:
    if at is not None:
        await at(name)


async def _judge(admin: Repository, combos: list[Combo]) -> Report:
    ledger: Owed = Counter()
    outcomes: Counter[str] = Counter()
    counters: Counter[str] = Counter()
    for combo in combos:
        ledger.update(combo.ledger)
        outcomes.update(combo.outcomes)
        counters.update({k: v for k, v in combo.stats.items() if isinstance(v, int)})
    entities = {k[0] for k in ledger} | {c.entity for c in combos}
    left = await left_over(admin, entities, ledger)
    slots = await slots_held(admin, [c.entity for c in combos if c.call == "single"], "api", 1_000)
    spurious, stored = await alerts_after_holds(admin, {})
    close_s = max(c.close_s for c in combos)
    return Report(left, slots, spurious, close_s, counters, outcomes, {"alerts": stored})


async def left_over(
    admin: Repository, entities: set[str], ledger: Owed
) -> dict[tuple[str, str, str], int]:
    """Consumption minus what the ledger owes, per bucket limit where they differ."""
    got: Owed = Counter()
    for entity in entities:
        for state in await admin.get_buckets(entity):
            got[(entity, state.resource, state.limit_name)] += state.total_consumed
    keys = set(got) | set(ledger)
    return {k: got[k] - ledger[k] for k in sorted(keys) if got[k] != ledger[k]}


async def slots_held(admin: Repository, entities: list[str], resource: str, cap: int) -> int:
    """Concurrency slots (limit `inflight` of `resource`, `cap` each) still held."""
    limiter = RateLimiter(admin)
    held = 0
    for entity in entities:
        held += cap - (await limiter.available(entity, resource))["inflight"]
    return held


async def alerts_after_holds(
    admin: Repository, final_use: dict[str, int], capacity: int = BUDGET.capacity
) -> tuple[list[str], int]:
    """Run the aggregator over the whole stream with its clock past every hold: (the alerts
    stored on `budget` whose threshold is above the entity's final use, `final_use` in whole
    units of `capacity`, absent 0: spurious; how many budget alerts were stored)."""
    later = _now_ms() + HOLD_MS + 1
    async with StreamRunner.from_repository(admin, clock=lambda: later) as runner:
        await runner.drain()
    alerts, cursor = await admin.get_alerts(limit=1_000)
    assert cursor is None
    budget = [a for a in alerts if a.resource == "budget"]
    spurious = [
        f"{a.entity_id} {a.limit_name} {a.threshold}%"
        for a in budget
        if a.threshold * capacity > 100 * final_use.get(a.entity_id, 0)
    ]
    return spurious, len(budget)


# --- the engine killed ------------------------------------------------------------------------


async def engine_killed(
    data_dir: Path,
    *,
    down_s: float,
    users: int = 4,
    tasks: int = 8,
    before_s: float = 2.0,
    after_s: float = 2.0,
    deadline: float = 1.0,
    seed: int = 41,
) -> Report:
    """See the module docstring: the engine (its data in `data_dir`) is SIGKILLed `before_s`
    into the workload and started again on the same port `down_s` later."""
    rng = random.Random(seed)
    engine = start_engine(data_dir=data_dir)
    endpoint, port = engine.endpoint_url, engine.port
    table = "outage-kill"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=REGION)
    admin = await Repository.open(table=table, endpoint_url=endpoint, region=REGION)
    await define(admin)
    await admin.set_resource_defaults(
        "search",
        [
            Limit.per_minute("requests", 100_000),
            Limit.per_minute("units", 10_000_000),
            Limit.concurrent("inflight", 3),
        ],
    )
    await admin.set_resource_defaults("budget", [KILL_BUDGET])
    names = [f"user-{i}" for i in range(users)]
    for name in names:
        await admin.create_entity(entity_id=name, parent_id="org-acme")
    repo = await Repository.open(
        table=table, endpoint_url=endpoint, region=REGION, acquire_timeout=deadline,
        client_config=TIMEOUTS,
    )  # fmt: skip
    limiter = RateLimiter(repo)
    ledger: Owed = Counter()
    outcomes: Counter[str] = Counter()
    for name in names:  # warm: each user's config read and items written, no deadline
        async with limiter.acquire(
            name, "search", {"requests": 1, "units": 100, "inflight": 1},
            also={"budget": {"weekly": 1_000}}, timeout=None,
        ):  # fmt: skip
            pass
        ledger[(name, "search", "requests")] += 1
        ledger[(name, "search", "units")] += 100
        ledger[("org-acme", "search", "units")] += 100
        ledger[(name, "budget", "weekly")] += 1_000
    stop = asyncio.Event()
    offset = [0]
    aggregator = StreamRunner(table, endpoint, region=REGION, clock=lambda: _now_ms() + offset[0])

    async def worker(index: int) -> None:
        mode = MODES[index % 2]
        while not stop.is_set():
            entity = rng.choice(names)
            owed = Counter(
                {
                    (entity, "search", "requests"): 1,
                    (entity, "search", "units"): 101,
                    ("org-acme", "search", "units"): 101,
                    (entity, "budget", "weekly"): 1_000,
                }
            )
            try:
                async with limiter.acquire(
                    entity, "search", {"requests": 1, "units": 100, "inflight": 1},
                    also={"budget": {"weekly": 1_000}}, on_unavailable=mode,
                ) as lease:  # fmt: skip
                    if lease.degraded:
                        outcomes["degraded"] += 1
                    else:
                        await asyncio.sleep(rng.random() * 0.05)
                        await lease.adjust(units=1)
                        ledger.update(owed)
                        outcomes["admitted"] += 1
            except RateLimiterUnavailable:
                outcomes["refused"] += 1
                await asyncio.sleep(0.05)
            except RateLimitExceeded:
                outcomes["limited"] += 1

    async with aggregator:
        running = asyncio.ensure_future(aggregator.run(stop, poll_interval=0.2))
        workers = [asyncio.ensure_future(worker(i)) for i in range(tasks)]
        await asyncio.sleep(before_s)
        assert engine.signal(signal.SIGKILL)  # its data stays on disk
        killed_at = time.monotonic()
        await asyncio.sleep(down_s)
        engine = start_engine(port=port, data_dir=data_dir)
        restarted_after = time.monotonic() - killed_at
        await asyncio.sleep(after_s)
        stop.set()
        await asyncio.gather(*workers)
        started = time.monotonic()
        await repo.close(timeout=60)
        close_s = time.monotonic() - started
        counters = Counter({k: v for k, v in repo.get_cache_stats().as_dict().items()
                            if isinstance(v, int)})  # fmt: skip
        await running
        await aggregator.drain()
    try:
        entities = set(names) | {"org-acme"}
        left = await left_over(admin, entities, ledger)
        users_units = sum(v for (e, r, n), v in ledger.items() if e != "org-acme" and n == "units")
        org_units = sum(
            s.total_consumed for s in await admin.get_buckets("org-acme") if s.limit_name == "units"
        )
        slots = await slots_held(admin, names, "search", 3)
        final = {e: v for (e, r, n), v in ledger.items() if r == "budget"}
        spurious, stored = await alerts_after_holds(admin, final, KILL_BUDGET.capacity)
    finally:
        await admin.close()
        engine.stop()
    extra = {
        "alerts": stored,
        "restarted_after_s": round(restarted_after, 1),
        "org_units": org_units,
        "users_units": users_units,
    }
    return Report(left, slots, spurious, close_s, counters, outcomes, extra)
