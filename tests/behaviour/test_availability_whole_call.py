"""`check_availability` answers the acquire's question (docs/limits-and-time.md): the cascade parent
is judged too, and a need above `max_request` never fits instead of quoting a wait."""

from __future__ import annotations

import math

import pytest

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository


async def test_a_cascading_parents_rejection_is_reported(
    repo: Repository, limiter: RateLimiter
) -> None:
    await repo.set_resource_defaults("search", [Limit.per_minute("requests", 100)], cascade=True)
    await repo.create_entity("org-z")
    await repo.set_limits("org-z", [Limit.per_minute("requests", 2)], resource="search")
    await repo.create_entity("user-c1", parent_id="org-z")
    for _ in range(2):
        async with limiter.acquire("user-c1", "search", {"requests": 1}):
            pass
    report = await repo.check_availability("user-c1", "search", {"requests": 1})
    assert report.available == {"requests": 98}  # the entity's own balance
    assert report.status("requests").entity_id == "user-c1"
    assert report.allowed is False and report.exceeded == ["requests"]
    assert [(s.entity_id, s.exceeded) for s in report.statuses] == [
        ("user-c1", False),
        ("org-z", True),
    ]
    assert 0 < report.retry_after_seconds <= 30.001
    with pytest.raises(RateLimitExceeded) as info:  # the acquire agrees
        async with limiter.acquire("user-c1", "search", {"requests": 1}):
            pass
    violation = info.value.primary_violation
    assert violation is not None and violation.entity_id == "org-z"
    # a parent that declares none of the needed limits is not judged
    assert (await repo.check_availability("user-c1", "search")).allowed is True


async def test_a_need_above_the_whole_allowance_never_fits(repo: Repository) -> None:
    await repo.set_resource_defaults("budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1")])
    report = await repo.check_availability("user-1", "budget", {"weekly": 6_000_000})
    status = report.status("weekly")
    assert (status.max_request, status.exceeded) == (5_000_000, True)
    assert report.allowed is False
    assert math.isinf(report.retry_after_seconds)  # not "retry after 490833 s"
    fits = await repo.check_availability("user-1", "budget", {"weekly": 5_000_000})
    assert fits.allowed and fits.retry_after_seconds == 0.0


async def test_a_parents_rejection_names_the_parent(repo: Repository, limiter: RateLimiter) -> None:
    await repo.set_resource_defaults("search", [Limit.per_minute("requests", 100)], cascade=True)
    await repo.create_entity("org-z")
    await repo.set_limits("org-z", [Limit.per_minute("requests", 1)], resource="search")
    await repo.create_entity("user-c1", parent_id="org-z")
    async with limiter.acquire("user-c1", "search", {"requests": 1}):
        pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("user-c1", "search", {"requests": 1}):
            pass
    assert str(info.value) == "Rate limit exceeded for search (parent org-z): requests"


async def test_too_many_resources_says_how_many_are_allowed(limiter: RateLimiter) -> None:
    from zae_limiter import ValidationError

    also = {f"r{i}": {"units": 1} for i in range(16)}  # 17 resources with the primary
    with pytest.raises(ValidationError) as info:
        async with limiter.acquire("user-1", "search", {"requests": 1}, also=also):
            pass
    assert "16 extra resources (17 with the primary)" in str(info.value)
    assert "at most 15 extra resources (16 with the primary)" in str(info.value)
