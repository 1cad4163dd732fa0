"""Organisations and cascade (docs/organisations.md; seed page "Organisations")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from zae_limiter import (
    EntityNotFoundError,
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
    ValidationError,
)


async def org(limiter: RateLimiter, repo: Repository) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
    )
    await limiter.create_entity(entity_id="org-acme")
    await limiter.create_entity(entity_id="user-3", parent_id="org-acme")
    await repo.set_resource_cascade("search", True)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 1_000_000)], resource="search")


async def test_two_levels_only_and_the_parent_must_exist(limiter: RateLimiter) -> None:
    with pytest.raises(EntityNotFoundError):
        await limiter.create_entity(entity_id="u", parent_id="nobody")
    await limiter.create_entity(entity_id="org")
    await limiter.create_entity(entity_id="team", parent_id="org")
    with pytest.raises(ValidationError, match="two levels"):
        await limiter.create_entity(entity_id="u", parent_id="team")
    with pytest.raises(ValidationError):
        await limiter.set_parent("org", "team")  # org has children
    assert [e.id for e in await limiter.get_children("org")] == ["team"]


async def test_the_parent_is_debited_only_on_the_limits_it_declares(
    limiter: RateLimiter, repo: Repository
) -> None:
    await org(limiter, repo)
    async with limiter.acquire("user-3", "search", {"requests": 1, "units": 100}) as lease:
        await lease.adjust(units=20)
    assert (await limiter.available("org-acme", "search")) == {"units": 999_880}
    assert (await limiter.available("user-3", "search")) == {"requests": 59, "units": 9_880}


async def test_a_parent_rejection_refunds_the_child(limiter: RateLimiter, repo: Repository) -> None:
    await org(limiter, repo)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 150)], resource="search")
    async with limiter.acquire("user-3", "search", {"requests": 1, "units": 100}):
        pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("user-3", "search", {"requests": 1, "units": 100}):
            pass
    assert [(s.entity_id, s.limit_name) for s in info.value.violations] == [("org-acme", "units")]
    assert (await limiter.available("user-3", "search")) == {"requests": 59, "units": 9_900}


async def test_cascade_policy_levels(limiter: RateLimiter, repo: Repository) -> None:
    await org(limiter, repo)
    await repo.set_entity_cascade("user-3", False, resource="search")  # outranks the resource
    async with limiter.acquire("user-3", "search", {"units": 100}):
        pass
    assert (await limiter.available("org-acme", "search")) == {"units": 1_000_000}
    await repo.clear_entity_cascade("user-3", resource="search")
    async with limiter.acquire("user-3", "search", {"units": 100}):
        pass
    assert (await limiter.available("org-acme", "search")) == {"units": 999_900}
    assert await repo.get_resource_cascade("search") is True
    await repo.clear_resource_cascade("search")
    await limiter.create_entity(entity_id="user-4", parent_id="org-acme", cascade=True)
    async with limiter.acquire("user-4", "search", {"units": 100}):  # the entity's own flag
        pass
    assert (await limiter.available("org-acme", "search")) == {"units": 999_800}


async def test_a_disabled_parent_refuses_the_child(limiter: RateLimiter, repo: Repository) -> None:
    await org(limiter, repo)
    await repo.disable_entity("org-acme", resource="search")
    with pytest.raises(ResourceDisabled) as info:
        async with limiter.acquire("user-3", "search", {"units": 1}):
            pass
    assert info.value.entity_id == "org-acme"


async def two_organisations(open_repo: Any) -> tuple[RateLimiter, RateLimiter]:
    """Two processes (an admin, a caller); org-north and org-south, 1,000 units a day each,
    and user-4 under org-north."""
    a_repo = await open_repo()
    a = RateLimiter(a_repo)
    b = RateLimiter(await open_repo())
    await a.set_resource_defaults("search", [Limit.per_minute("units", 10_000)])
    await a_repo.set_resource_cascade("search", True)
    for name in ("org-north", "org-south"):
        await a.create_entity(entity_id=name)
        await a.set_limits(name, [Limit.per_day("units", 1_000)], resource="search")
    await a.create_entity(entity_id="user-4", parent_id="org-north")
    return a, b


async def test_moving_an_entity_reaches_another_process(open_repo: Any) -> None:
    a, b = await two_organisations(open_repo)
    async with b.acquire("user-4", "search", {"units": 10}):
        pass
    assert await a.set_parent("user-4", "org-south") == 1
    async with b.acquire("user-4", "search", {"units": 10}):
        pass
    assert (await a.available("org-north", "search")) == {"units": 990}  # stays charged
    assert (await a.available("org-south", "search")) == {"units": 990}
    assert await a.set_parent("user-4", "org-south") == 0


async def test_an_organisation_cap_holds_under_32_users(open_repo: Any) -> None:
    repos = [await open_repo(rejection_cache_ttl=0) for _ in range(4)]
    admin = RateLimiter(repos[0])
    await admin.set_resource_defaults("api", [Limit.per_minute("rpm", 1_000)])
    await repos[0].set_resource_cascade("api", True)
    await admin.create_entity(entity_id="org")
    await admin.set_limits("org", [Limit.per_minute("rpm", 100)], resource="api")
    users = [f"user-{i}" for i in range(32)]
    for user in users:
        await admin.create_entity(entity_id=user, parent_id="org")
    admitted = 0

    async def hammer(limiter: RateLimiter, user: str) -> None:
        nonlocal admitted
        for _ in range(5):
            try:
                async with limiter.acquire(user, "api", {"rpm": 1}):
                    admitted += 1
            except RateLimitExceeded:
                pass

    await asyncio.gather(*(hammer(RateLimiter(repos[i % 4]), user) for i, user in enumerate(users)))
    assert 50 <= admitted <= 100  # frozen clock: never more than the org's burst
    assert (await admin.available("org", "api")) == {"rpm": 100 - admitted}
    consumed = 0
    for user in users:
        consumed += 1_000 - (await admin.available(user, "api"))["rpm"]
    assert consumed == admitted  # no child is left debited for a rejected call


async def test_a_parent_change_during_a_lease_fails_its_consume_with_nothing_taken(
    open_repo: Any,
) -> None:
    """`make sim` (ci seed 28): set_parent while a lease is open made its consume() raise the
    acquire path's internal RulesChanged. It is refused as unavailable, nothing more taken; the
    lease's exit still reconciles against the parent it debited (reference §5.5)."""
    a, b = await two_organisations(open_repo)
    async with b.acquire("user-4", "search", {"units": 10}) as lease:
        assert await a.set_parent("user-4", "org-south") == 1
        with pytest.raises(RateLimiterUnavailable, match="parent") as info:
            await lease.consume(units=5)
        assert info.value.reason == "unavailable"
        assert lease.consumed == {"units": 10}
    assert (await a.available("org-north", "search")) == {"units": 990}
    assert (await a.available("org-south", "search")) == {"units": 1_000}
    assert (await a.available("user-4", "search")) == {"units": 9_990}
