"""Soft limits, bypass, disable and enable (docs/rolling-out.md)."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository, ResourceDisabled


async def test_a_soft_limit_admits_into_debt_and_reports_it(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True)]
    )
    async with limiter.acquire(
        "user-7", "search", consume={"rpm": 1}, also={"budget": {"weekly": 9_000_000}}
    ) as lease:
        assert lease.resource("budget").overdrawn == ["weekly"]
        assert lease.overdrawn == []  # search is unmetered
    availability = await limiter.check_availability("user-7", "budget")
    assert availability.available == {"weekly": -4_000_000}
    assert availability.status("weekly").overdrawn


async def test_other_hard_limits_still_gate_a_soft_one(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults(
        "api", [Limit.per_minute("soft_units", 10, soft=True), Limit.per_minute("rpm", 1)]
    )
    async with limiter.acquire("u", "api", {"soft_units": 50, "rpm": 1}) as lease:
        assert lease.overdrawn == ["soft_units"]
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u", "api", {"soft_units": 1, "rpm": 1}):
            pass
    assert [s.limit_name for s in info.value.violations] == ["rpm"]


async def test_storing_it_again_without_soft_enforces_it(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("units", 10, soft=True)])
    async with limiter.acquire("u", "api", {"units": 15}):
        pass
    await limiter.set_resource_defaults("api", [Limit.per_minute("units", 10)])
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("u", "api", {"units": 1}):
            pass


async def test_bypass_keeps_counting_but_debits_no_balance(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 10)])
    await repo.create_entity("user-7")
    assert await repo.bypass_entity("user-7", resource="budget") == 0
    async with limiter.acquire(
        "user-7", "search", {"rpm": 1}, also={"budget": {"units": 500}}
    ) as lease:
        assert lease.resource("budget").bypassed and not lease.bypassed
    with pytest.raises(RateLimitExceeded) as info:  # per-resource limits still apply
        async with limiter.acquire("user-7", "search", {"rpm": 1}, also={"budget": {"units": 5}}):
            pass
    assert [s.resource for s in info.value.violations] == ["search"]
    [state] = await repo.get_buckets("user-7", "budget")
    assert state.tokens == 10 and state.total_consumed == 500
    assert await repo.get_entity_disabled("user-7", "budget") == "bypass"
    assert await repo.clear_entity_disabled("user-7", resource="budget") == 1
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("user-7", "budget", {"units": 11}):
            pass


async def test_an_entity_bypass_never_extends_to_its_parent(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
    await limiter.create_entity(entity_id="org")
    await limiter.create_entity(entity_id="u", parent_id="org")
    await repo.set_resource_cascade("api", True)
    await limiter.set_limits("org", [Limit.per_minute("rpm", 1)], resource="api")
    await repo.bypass_entity("u")
    async with limiter.acquire("u", "api", {"rpm": 1}):
        pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    assert info.value.violations[0].entity_id == "org"


async def test_disable_enable_and_clear(
    limiter: RateLimiter, repo: Repository, open_repo: Any
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
    async with limiter.acquire("u", "api", {"rpm": 1}):
        pass
    await repo.disable_resource("api")
    with pytest.raises(ResourceDisabled) as info:
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    assert info.value.level == "resource"
    with pytest.raises(ResourceDisabled):
        await limiter.check_availability("u", "api")
    assert await repo.enable_entity("u", resource="api") == 1  # readmits one entity
    async with limiter.acquire("u", "api", {"rpm": 1}):
        pass
    with pytest.raises(ResourceDisabled):
        async with limiter.acquire("v", "api", {"rpm": 1}):
            pass
    await repo.clear_resource_disabled("api")
    await repo.create_entity("v")
    await repo.disable_entity("v")  # _default_ level: every resource
    other = RateLimiter(await open_repo())
    with pytest.raises(ResourceDisabled) as info:
        async with other.acquire("v", "api", {"rpm": 1}):
            pass
    assert info.value.level == "entity_default"
    await repo.clear_entity_disabled("v")
    async with other.acquire("v", "api", {"rpm": 1}):
        pass


async def test_flags_leave_the_warm_path_cost_alone(
    limiter: RateLimiter, repo: Repository, wire: Any
) -> None:
    await limiter.set_resource_defaults(
        "api", [Limit.per_minute("rpm", 100), Limit.per_minute("soft", 1, soft=True)]
    )
    await repo.enable_resource("api")
    await repo.set_resource_cascade("api", False)
    async with limiter.acquire("u", "api", {"rpm": 1, "soft": 5}):
        pass
    with wire.block() as w:
        async with limiter.acquire("u", "api", {"rpm": 1, "soft": 5}):
            pass
    assert (w.round_trips, w.rcu, w.wcu) == (1, 0, 1)
