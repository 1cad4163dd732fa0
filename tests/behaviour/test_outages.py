"""Outages on DynamoDB Local through a loopback proxy (docs/on-unavailable.md, deadlines).

Per shape (engine stopped, answers held, slow half of the writes, connection refused,
throttling), mode (ALLOW, BLOCK), call (single resource, the seed's three-bucket call) and
entity (cold, warm): a few concurrent acquires with `timeout=0.2` run while the fault lasts,
each adjusting inside its block (an exit write). Every call must return (a generous hang guard,
not a timing assertion) with an outcome its mode allows. After the engine recovers and `close()`
drained: every bucket's consumption equals the ledger of admitted, non-degraded leases, and
nothing was left unresolved.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
from botocore.config import Config

from support.outage import outage_proxy, resume_engine, stop_engine
from zae_limiter import Limit, OnUnavailable, RateLimiter, RateLimiterUnavailable, Repository

SHAPES = ("stopped", "hold", "slow_half", "refuse", "throttle")
CALLS = 4
FAULT_S = 0.6  # the fault lasts past every caller's deadline
TIMEOUTS = Config(connect_timeout=0.5, read_timeout=0.5)


async def seed_setup(admin: RateLimiter) -> None:
    await admin.set_resource_defaults(
        "search", [Limit.per_minute("requests", 10_000), Limit.per_minute("units", 1_000_000)]
    )
    await admin.set_resource_defaults(
        "budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1")]
    )
    await admin.create_entity(entity_id="org-acme")
    await admin.repository.set_resource_cascade("search", True)
    await admin.set_limits("org-acme", [Limit.per_day("units", 1_000_000)], resource="search")


def call_of(
    shape: str, entity: str
) -> tuple[tuple[Any, ...], dict[str, Any], dict[tuple[str, str, str], int]]:
    """(args, kwargs, what one admitted lease owes per (entity, resource, limit), with its
    adjustment) for the single or the three-bucket call."""
    if shape == "single":
        return (entity, "api", {"rpm": 1}), {}, {(entity, "api", "rpm"): 2}
    kwargs = {"also": {"budget": {"weekly": 7_000}}}
    owed = {
        (entity, "search", "requests"): 1,
        (entity, "search", "units"): 101,
        ("org-acme", "search", "units"): 101,
        (entity, "budget", "weekly"): 7_000,
    }
    return (entity, "search", {"requests": 1, "units": 100}), kwargs, owed


async def consumption(admin: Repository, entities: set[str]) -> Counter[tuple[str, str, str]]:
    got: Counter[tuple[str, str, str]] = Counter()
    for entity in entities:
        for state in await admin.get_buckets(entity):
            got[(entity, state.resource, state.limit_name)] += state.total_consumed
    return got


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("call", ["single", "seed"])
@pytest.mark.parametrize("mode", [OnUnavailable.BLOCK, OnUnavailable.ALLOW], ids=["BLOCK", "ALLOW"])
@pytest.mark.parametrize("shape", SHAPES)
async def test_an_outage_answers_within_the_deadline_and_leaves_exactly_the_ledger(
    table: Any,
    ddb_local: Any,
    clock: Any,
    caplog: pytest.LogCaptureFixture,
    shape: str,
    mode: OnUnavailable,
    call: str,
    warm: bool,
) -> None:
    caplog.set_level(logging.WARNING, logger="zae_limiter")
    admin_repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    admin = RateLimiter(admin_repo)
    await admin.set_resource_defaults("api", [Limit.per_minute("rpm", 1_000_000)])
    if call == "seed":
        await seed_setup(admin)
    entity = "user-3"
    if call == "seed":
        await admin.create_entity(entity_id=entity, parent_id="org-acme")
    args, kwargs, owed_per_lease = call_of(call, entity)
    ledger: Counter[tuple[str, str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await Repository.open(
            table=table.name,
            endpoint_url=proxy.url,
            region=table.region,
            clock=clock,
            client_config=TIMEOUTS,
            acquire_timeout=0.2,
        )
        limiter = RateLimiter(repo)
        if warm:
            async with limiter.acquire(*args, timeout=None, **kwargs):
                pass
            ledger.update(
                {k: v - (1 if k[2] in ("rpm", "units") else 0) for k, v in owed_per_lease.items()}
            )

        async def one() -> None:
            try:
                async with limiter.acquire(*args, **{**kwargs, "on_unavailable": mode}) as lease:
                    if lease.degraded:
                        outcomes["degraded"] += 1
                        return
                    await lease.adjust(**({"rpm": 1} if call == "single" else {"units": 1}))
                    ledger.update(owed_per_lease)  # the body completed: its exit lands
                    outcomes["admitted"] += 1
            except RateLimiterUnavailable:
                outcomes["refused"] += 1

        stopped = ddb_local if shape == "stopped" else None
        if stopped is not None:
            stop_engine(stopped)
        else:
            await proxy.set_mode(shape)
        try:
            tasks = [asyncio.ensure_future(one()) for _ in range(CALLS)]
            done, stuck = await asyncio.wait(tasks, timeout=30)  # a hang guard
            await asyncio.sleep(max(0.0, FAULT_S))
        finally:
            if stopped is not None:
                resume_engine(stopped)
            await proxy.set_mode("pass")
        assert not stuck, f"{len(stuck)} acquires never returned"
        for task in done:
            task.result()  # only the outcomes one() allows
        await repo.close()
        stats = repo.get_cache_stats()
    assert stats.abandoned_at_close == 0 and stats.pending_resolutions == 0
    assert stats.undecided_writes == 0
    if shape in ("stopped", "hold") and warm:  # no write could be decided within the deadline:
        # each call's was resolved after it, or the call was answered at once, nothing sent,
        # behind a write already slower than its deadline (overload; docs/on-unavailable.md)
        assert stats.resolved_after_deadline + stats.shed_overloaded >= CALLS
    # (cold, the calls were still reading at their deadline: nothing was sent, nothing pends)
    if shape == "hold" and warm:  # every debit landed, its answer held: refunded off the path
        assert stats.refunded_after_deadline >= 1
        assert any("refunded after their callers" in r.message for r in caplog.records)
    if mode is OnUnavailable.BLOCK:
        assert outcomes["degraded"] == 0
    else:
        assert outcomes["refused"] == 0
    assert sum(outcomes.values()) == CALLS
    got = await consumption(admin_repo, {k[0] for k in owed_per_lease})
    expected = Counter({k: v for k, v in ledger.items() if v})
    assert {k: v for k, v in got.items() if v} == dict(expected), outcomes
    await admin_repo.close()
