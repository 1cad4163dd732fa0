"""The unmetered policy (docs/configuration.md): a mistyped resource is not silently free.

`also={"budgte": ...}` names a resource no level has limits for. "allow" admits it and warns
once, "warn" warns every call, "reject" refuses it before any write with the closest names that
do have limits; every policy counts the unmetered admissions per resource.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, Repository, ValidationError
from zae_limiter.dynamo import keys

Opener = Callable[..., Awaitable[Repository]]


async def configured(repo: Repository) -> RateLimiter:
    await repo.set_resource_defaults("search", [Limit.per_minute("requests", 10)])
    await repo.set_resource_defaults("budget", [Limit.per_day("units", 1_000)])
    return RateLimiter(repo)


async def call(limiter: RateLimiter) -> None:
    async with limiter.acquire("user-1", "search", {"requests": 1}, also={"budgte": {"units": 5}}):
        pass


async def bucket_items(repo: Repository) -> list[Any]:
    return await repo._store.query_all(
        repo.namespace_id, index=keys.GSI4, sk_prefix=f"{repo.namespace_id}#B#"
    )


async def test_allow_admits_warns_once_by_namespace_name_and_counts(
    open_repo: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = await configured(await open_repo())
    with caplog.at_level(logging.WARNING, logger="zae_limiter"):
        await call(limiter)
        await call(limiter)
    warnings = [r.getMessage() for r in caplog.records if "unmetered" in r.getMessage()]
    assert len(warnings) == 1 and "'budgte'" in warnings[0] and "'default'" in warnings[0]
    stats = limiter.repository.get_cache_stats()
    assert stats.unmetered_admissions == {"budgte": 2}
    assert stats.as_dict()["unmetered_admissions"] == {"budgte": 2}


async def test_warn_logs_every_call(open_repo: Opener, caplog: pytest.LogCaptureFixture) -> None:
    limiter = await configured(await open_repo(unmetered="warn"))
    with caplog.at_level(logging.WARNING, logger="zae_limiter"):
        for _ in range(3):
            await call(limiter)
    assert sum("unmetered" in r.getMessage() for r in caplog.records) == 3
    assert limiter.repository.get_cache_stats().unmetered_admissions == {"budgte": 3}


async def test_reject_names_the_closest_configured_resources_and_writes_nothing(
    open_repo: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZAEL_UNMETERED", "reject")
    repo = await open_repo()
    limiter = await configured(repo)
    with pytest.raises(ValidationError) as info:
        await call(limiter)
    assert info.value.value == "budgte"
    assert "did you mean 'budget'?" in str(info.value)
    assert await bucket_items(repo) == []  # the primary was not debited either
    assert repo.get_cache_stats().unmetered_admissions == {}
    async with limiter.acquire("user-1", "search", {"requests": 1}, also={"budget": {"units": 5}}):
        pass


async def test_an_unknown_policy_is_refused_at_open(open_repo: Opener) -> None:
    with pytest.raises(ValidationError, match="'allow', 'warn' or 'reject'"):
        await open_repo(unmetered="deny")
