"""Several resources in one acquire (docs/several-resources.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from support.faults import ddb_error
from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
    ValidationError,
)
from zae_limiter.limiter import MAX_ACQUIRE_RESOURCES


async def balances(limiter: RateLimiter, entity: str, *resources: str) -> dict[str, dict[str, int]]:
    return {r: await limiter.available(entity, r) for r in resources}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"also": {f"r{i}": {"x": 1} for i in range(MAX_ACQUIRE_RESOURCES)}}, "at most 15 extra"),
        ({"also": {"search": {"rpm": 1}}}, "primary"),
        ({"also": {"budget": {"units": 1}}, "limits": [Limit.per_minute("rpm", 1)]}, "limits="),
        ({"also": {"budget": {"units": -1}}}, "between"),
        ({"also": {"budget": {}}}, "at least one limit"),
        ({"also": {"bad name!": {"units": 1}}}, "resource"),
    ],
)
async def test_rules_are_checked_before_any_io(
    limiter: RateLimiter, wire: Any, kwargs: dict[str, Any], match: str
) -> None:
    with wire.block() as w, pytest.raises(ValidationError, match=match):
        async with limiter.acquire("user-1", "search", {"rpm": 1}, **kwargs):
            pass
    assert w.requests == []


async def test_sixteen_resources_are_allowed_and_an_empty_also_is_plain(
    limiter: RateLimiter,
) -> None:
    also = {f"r{i}": {"x": 1} for i in range(MAX_ACQUIRE_RESOURCES - 1)}
    async with limiter.acquire("user-1", "search", {"rpm": 1}, also=also) as lease:
        assert len(lease.resources) == MAX_ACQUIRE_RESOURCES
    async with limiter.acquire("user-1", "search", {"rpm": 1}, also={}) as lease:
        assert lease.resources == ("search",)


async def test_a_rejection_refunds_every_resource(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 100)])
    async with limiter.acquire("u", "search", {"rpm": 1}, also={"budget": {"units": 1}}):
        pass
    before = await balances(limiter, "u", "search", "budget")
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u", "search", {"rpm": 1}, also={"budget": {"units": 500}}):
            pass
    assert {(s.resource, s.limit_name) for s in info.value.statuses} == {
        ("search", "rpm"),
        ("budget", "units"),
    }
    assert info.value.as_dict()["limits"][1]["resource"] == "budget"
    assert await balances(limiter, "u", "search", "budget") == before


async def test_handles_keep_same_named_limits_apart(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("units", 1_000)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 10_000)])
    async with limiter.acquire(
        "u", "search", {"units": 50}, also={"budget": {"units": 5}}
    ) as lease:
        await lease.adjust(units=10)
        await lease.resource("budget").consume(units=1)
        await lease.resource("budget").release(units=2)
        assert lease.consumed == {"units": 60}
        assert lease.resource("budget").consumed == {"units": 4}
        with pytest.raises(ValidationError):
            lease.resource("other")
    assert await balances(limiter, "u", "search", "budget") == {
        "search": {"units": 940},
        "budget": {"units": 9_996},
    }


async def test_an_exception_refunds_every_resource_and_consume(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("units", 1_000)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 10_000)])
    with pytest.raises(ZeroDivisionError):
        async with limiter.acquire(
            "u", "search", {"units": 50}, also={"budget": {"units": 5}}
        ) as lease:
            await lease.resource("budget").consume(units=100)
            _ = 1 / 0
    assert await balances(limiter, "u", "search", "budget") == {
        "search": {"units": 1_000},
        "budget": {"units": 10_000},
    }


async def test_disabled_outranks_a_rejection_and_nothing_is_debited(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 1)])
    await repo.disable_resource("search")
    with pytest.raises(ResourceDisabled) as info:
        async with limiter.acquire("u", "budget", {"units": 5}, also={"search": {"rpm": 1}}):
            pass
    assert info.value.level == "resource" and info.value.as_dict()["error"] == "resource_disabled"
    assert await repo.get_buckets("u") == []


@pytest.mark.parametrize("mode", [OnUnavailable.BLOCK, OnUnavailable.ALLOW])
async def test_an_error_on_one_parallel_write_leaves_no_debit(
    repo: Repository, mode: OnUnavailable
) -> None:
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 100)])
    async with limiter.acquire("u", "search", {"rpm": 1}, also={"budget": {"units": 1}}):
        pass
    before = await balances(limiter, "u", "search", "budget")
    client = repo.transport.client
    calls = {"n": 0}

    def fail_budget(request: Any, **_: Any) -> Any:
        if b"budget" in (request.body or b"") and b"ADD" not in request.body and calls["n"] < 20:
            calls["n"] += 1
            return ddb_error("ProvisionedThroughputExceededException", status=400)
        return None

    client.meta.events.register("before-send.dynamodb.UpdateItem", fail_budget, unique_id="f")
    try:
        if mode is OnUnavailable.BLOCK:
            with pytest.raises(RateLimiterUnavailable):
                async with limiter.acquire(
                    "u", "search", {"rpm": 1}, also={"budget": {"units": 1}}
                ):
                    pass
        else:
            async with limiter.acquire(
                "u", "search", {"rpm": 1}, on_unavailable=mode, also={"budget": {"units": 1}}
            ) as lease:
                assert lease.degraded
    finally:
        client.meta.events.unregister("before-send.dynamodb.UpdateItem", unique_id="f")
    assert calls["n"] > 0
    assert await balances(limiter, "u", "search", "budget") == before


async def test_concurrent_acquires_never_admit_more_than_the_budget(open_repo: Any) -> None:
    limiters = [RateLimiter(await open_repo(rejection_cache_ttl=0)) for _ in range(4)]
    await limiters[0].set_resource_defaults("search", [Limit.per_minute("rpm", 10_000)])
    await limiters[0].set_resource_defaults("budget", [Limit.quota("weekly", 25, cron="0 0 * * 1")])
    admitted = 0

    async def worker(limiter: RateLimiter) -> None:
        nonlocal admitted
        for _ in range(12):
            try:
                async with limiter.acquire(
                    "u", "search", {"rpm": 1}, also={"budget": {"weekly": 1}}
                ):
                    admitted += 1
            except RateLimitExceeded:
                pass

    await asyncio.gather(*(worker(lim) for lim in limiters for _ in range(2)))
    assert admitted <= 25
    final = await balances(limiters[0], "u", "search", "budget")
    assert final["budget"]["weekly"] == 25 - admitted
    assert final["search"]["rpm"] == 10_000 - admitted
