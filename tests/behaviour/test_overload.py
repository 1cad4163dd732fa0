"""Overload at the public API, on DynamoDB Local (docs/on-unavailable.md "Overload"): an
overloaded call is answered at once with its reason (the degraded lease under ALLOW), nothing
sent and nothing debited; a call the rejection cache refuses is a 429 first; the counters reach
`get_cache_stats()` and the request hook. The writer's load is set by hand (a write in flight
whose round trip takes a minute), so no test waits on a slow table: tests/unit/
test_acquire_overload.py drives the estimates on a simulated one."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    RequestEvent,
)
from zae_limiter.acquire.load import Load


def overloaded(repo: Any) -> Load:
    """The repository's writer, as if a write were in flight that takes a minute to answer."""
    load: Load = repo.scope.shared.load
    load.inflight += 1
    load.rtt_ms = 60_000.0
    return load


async def test_an_overloaded_call_is_answered_at_once_and_debits_nothing(open_repo: Any) -> None:
    events: list[RequestEvent] = []
    repo = await open_repo(on_request=events.append)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    load = overloaded(repo)
    events.clear()
    with pytest.raises(RateLimiterUnavailable) as raised:
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert raised.value.reason == "overloaded"
    assert "cannot decide this call within its" in str(raised.value)
    assert "nothing was debited" in str(raised.value)
    allow = OnUnavailable.ALLOW
    async with limiter.acquire("u1", "api", {"rpm": 1}, on_unavailable=allow) as lease:
        assert lease.degraded
    assert events == []  # neither sent a request
    load.inflight -= 1  # the write in flight was answered: the next call goes out
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    stats = repo.get_cache_stats()
    assert (stats.shed_overloaded, stats.decided_calls, stats.bucket_writes) == (2, 2, 2)
    assert stats.writes_per_decided_call == 1.0
    assert (events[-1].shed_overloaded, events[-1].writes_per_decided_call) == (2, 1.0)
    assert (await limiter.available("u1", "api"))["rpm"] == 8  # the clock is fixed: no refill


async def test_a_call_the_rejection_cache_refuses_is_a_429_however_overloaded(
    open_repo: Any,
) -> None:
    repo = await open_repo()
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 1)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    overloaded(repo)  # the image the write returned shows nothing left
    with pytest.raises(RateLimitExceeded) as raised:
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert [v.limit_name for v in raised.value.violations] == ["rpm"]
    assert raised.value.retry_after_seconds == pytest.approx(60.0, abs=0.01)
    stats = repo.get_cache_stats()
    assert (stats.local_rejections, stats.shed_overloaded, stats.decided_calls) == (1, 0, 2)
