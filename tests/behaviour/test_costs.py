"""The spec's cost tables, counted on the wire against DynamoDB Local (docs/performance.md).

Round trips are waves of requests; capacity is what DynamoDB bills, table and indexes together
(failed conditional writes at 1 WCU each, transactions at 2 WCU per item, by the AWS rule).
"""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository


@pytest.fixture(autouse=True)
def _deadline_no_load_reaches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Costs of calls that end in time: on a loaded machine a 1 s deadline sends an exit off
    the caller's path or sheds a call, and the next call's requests are no longer its own (a
    warm call counted 2 round trips once, in a full run at load 11)."""
    monkeypatch.setenv("ZAEL_ACQUIRE_TIMEOUT", "30")


def cost(w: Any) -> tuple[int, float, float]:
    return w.round_trips, w.rcu, w.wcu


async def warm(limiter: RateLimiter, *args: Any, **kwargs: Any) -> None:
    async with limiter.acquire(*args, **kwargs):
        pass


async def exit_cost(acquisition: Any, wire: Any, error: BaseException | None = None) -> Any:
    """Record only the exit of an acquire (its reconcile, or its refund when `error`)."""
    with wire.block() as w:
        await acquisition.__aexit__(type(error) if error else None, error, None)
    return w


# --- single resource ---------------------------------------------------------------------------


async def test_single_resource_costs(limiter: RateLimiter, wire: Any) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 10_000)])
    with wire.block() as first:
        await warm(limiter, "u1", "api", {"tokens": 1})
    assert first.round_trips <= 4
    with wire.block() as admit:
        async with limiter.acquire("u1", "api", {"tokens": 1}) as lease:
            pass
    assert cost(admit) == (1, 0, 1)  # 1 WCU including indexes: no index writes on the hot path
    assert admit.index_wcu == 0
    acquisition = limiter.acquire("u1", "api", {"tokens": 5})
    lease = await acquisition.__aenter__()
    with wire.block() as deferred:
        await lease.adjust(tokens=3)
    assert deferred.requests == []  # adjust() is written on exit
    assert cost(await exit_cost(acquisition, wire)) == (1, 0, 1)
    acquisition = limiter.acquire("u1", "api", {"tokens": 5})
    lease = await acquisition.__aenter__()
    await lease.adjust(tokens=2)
    await lease.adjust(tokens=-2)
    assert (await exit_cost(acquisition, wire)).requests == []  # exit with no net change
    acquisition = limiter.acquire("u1", "api", {"tokens": 5})
    await acquisition.__aenter__()
    refund = await exit_cost(acquisition, wire, RuntimeError("work failed"))
    assert cost(refund) == (1, 0, 1)
    async with limiter.acquire("u1", "api", {"tokens": 5}) as lease:
        with wire.block() as more:
            await lease.consume(tokens=5)
    assert cost(more) == (1, 0, 1)


async def test_a_rejection_is_decided_from_the_failed_write(open_repo: Any, wire: Any) -> None:
    other = RateLimiter(await open_repo())
    limiter = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 2)])
    await warm(limiter, "u1", "api", {"rpm": 1})
    await warm(other, "u1", "api", {"rpm": 1})  # limiter's image still shows one left
    with wire.block() as w, pytest.raises(RateLimitExceeded):
        await warm(limiter, "u1", "api", {"rpm": 1})
    assert cost(w) == (1, 0, 1)  # the failed conditional write's returned image decides


async def test_the_rejection_cache_answers_repeats_with_no_call(
    repo: Repository, wire: Any
) -> None:
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 1)])
    await warm(limiter, "u1", "api", {"rpm": 1})
    with pytest.raises(RateLimitExceeded):
        await warm(limiter, "u1", "api", {"rpm": 1})
    with wire.block() as w, pytest.raises(RateLimitExceeded):
        await warm(limiter, "u1", "api", {"rpm": 1})
    assert w.requests == []
    assert repo.get_cache_stats().local_rejections >= 1


# --- the seed pages ----------------------------------------------------------------------------


async def seed_setup(limiter: RateLimiter, repo: Repository, *, org_budget: bool = False) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
    )
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1")]
    )
    await limiter.create_entity(entity_id="org-acme")
    await limiter.create_entity(entity_id="user-3", parent_id="org-acme")
    await repo.set_resource_cascade("search", True)
    await repo.set_resource_cascade("budget", org_budget)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 1_000_000)], resource="search")
    if org_budget:
        await limiter.set_limits(
            "org-acme", [Limit.quota("weekly", 500_000_000, cron="0 0 * * 1")], resource="budget"
        )


CALL: dict[str, Any] = {
    "consume": {"requests": 1, "units": 100},
    "also": {"budget": {"weekly": 7_000}},
}


async def test_seed_cost_table_resource_cascades_budget_per_user(
    limiter: RateLimiter, repo: Repository, wire: Any
) -> None:
    await seed_setup(limiter, repo)
    with wire.block() as first:
        await warm(limiter, "user-3", "search", **CALL)
    assert first.round_trips <= 4
    assert first.rcu <= 10
    assert first.wcu <= 12
    acquisition = limiter.acquire("user-3", "search", **CALL)
    with wire.block() as admit:
        lease = await acquisition.__aenter__()
    assert cost(admit) == (1, 0, 3)
    await lease.adjust(units=40)
    await lease.resource("budget").adjust(weekly=2_000)
    assert cost(await exit_cost(acquisition, wire)) == (1, 0, 3)
    with wire.block() as exact:
        await warm(limiter, "user-3", "search", **CALL)
    assert cost(exact) == (1, 0, 3)  # the estimate was exact: no reconcile


async def test_seed_cost_table_with_a_real_time_org_budget(
    limiter: RateLimiter, repo: Repository, wire: Any
) -> None:
    await seed_setup(limiter, repo, org_budget=True)
    await warm(limiter, "user-3", "search", **CALL)
    acquisition = limiter.acquire("user-3", "search", **CALL)
    lease = await acquisition.__aenter__()
    await lease.adjust(units=40)
    await lease.resource("budget").adjust(weekly=2_000)
    assert cost(await exit_cost(acquisition, wire)) == (1, 0, 4)
    with wire.block() as admit:
        await warm(limiter, "user-3", "search", **CALL)
    assert cost(admit) == (1, 0, 4)


async def test_seed_cost_table_rejections(open_repo: Any, wire: Any) -> None:
    repo = await open_repo()
    limiter = RateLimiter(repo)
    await seed_setup(limiter, repo)
    await limiter.set_limits(
        "user-3", [Limit.quota("weekly", 10_000, cron="0 0 * * 1")], resource="budget"
    )
    await warm(limiter, "user-3", "search", **CALL)  # warm every cache; 3,000 left on the budget
    other = RateLimiter(await open_repo())
    await warm(other, "user-3", "search", consume={"requests": 1}, also={"budget": {"weekly": 1}})
    # `budget` rejected, cache cold (this process's image says 3,000 are left: it writes)
    cold = RateLimiter(repo)
    repo._shared.images.rejection_ttl_ms = 0
    with wire.block() as w, pytest.raises(RateLimitExceeded) as info:
        await warm(cold, "user-3", "search", **CALL)
    assert [(s.resource, s.limit_name) for s in info.value.violations] == [("budget", "weekly")]
    assert w.round_trips == 2 and w.rcu == 0
    assert w.wcu == 3 + 2  # three writes (one failed), two refunds
    # and again, now that the rejection cache knows
    repo._shared.images.rejection_ttl_ms = 1_000
    with pytest.raises(RateLimitExceeded):
        await warm(limiter, "user-3", "search", **CALL)
    with wire.block() as cached, pytest.raises(RateLimitExceeded):
        await warm(limiter, "user-3", "search", **CALL)
    assert cost(cached) == (0, 0, 0)
