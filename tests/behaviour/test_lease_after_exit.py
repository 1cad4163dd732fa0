"""After the block: read-only lease members keep their final values; only the members that
change the lease raise `LeaseExpiredError`. And the config cache is dropped by a coroutine,
like every other `Repository` method."""

from __future__ import annotations

import inspect

import pytest

from zae_limiter import LeaseExpiredError, Limit, RateLimiter, Repository, SyncRepository


async def test_read_only_members_keep_their_final_values_after_the_block(
    limiter: RateLimiter,
) -> None:
    await limiter.set_resource_defaults("llm", [Limit.per_day("tokens", 10_000)])
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", soft=True)]
    )
    async with limiter.acquire(
        "user-1", "llm", {"tokens": 500}, also={"budget": {"weekly": 150}}
    ) as lease:
        await lease.adjust(tokens=230)
    assert lease.consumed == {"tokens": 730}
    assert lease.resources == ("llm", "budget")
    assert (lease.bypassed, lease.overdrawn, lease.degraded) == (False, [], False)
    budget = lease.resource("budget")
    assert (budget.consumed, budget.overdrawn) == ({"weekly": 150}, ["weekly"])
    for change in (lease.consume, lease.adjust, lease.release):
        with pytest.raises(LeaseExpiredError):
            await change(tokens=1)
    for change in (budget.consume, budget.adjust, budget.release):
        with pytest.raises(LeaseExpiredError):
            await change(weekly=1)
    assert lease.consumed == {"tokens": 730}  # nothing changed by the refused calls


async def test_invalidate_config_cache_is_a_coroutine(repo: Repository) -> None:
    assert inspect.iscoroutinefunction(Repository.invalidate_config_cache)
    await repo.set_resource_defaults("api", [Limit.per_minute("rpm", 5)])
    await repo.resolve_limits("u1", "api")
    assert repo.get_cache_stats().size > 0
    await repo.invalidate_config_cache()
    assert repo.get_cache_stats().size == 0
    assert not inspect.iscoroutinefunction(SyncRepository.invalidate_config_cache)
