"""What surrounds the acquire path of a concurrency limit (docs/concurrency.md): top-up and
reset, `check_availability`, the RateLimit headers of a lease; against DynamoDB Local."""

from __future__ import annotations

import pytest

from support.clock import FakeClock
from support.ratelimit_fields import checked
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, ValidationError
from zae_limiter.integrations.headers import ratelimit_headers

LLM = [Limit.per_minute("requests", 100), Limit.concurrent("parallel", 2, lease_ttl=30)]


async def test_top_up_and_reset_refuse_a_concurrency_limit(limiter: RateLimiter) -> None:
    """What a concurrency limit holds is live work: naming it in a top-up or a reset is refused
    before any write."""
    repo = limiter.repository
    await limiter.set_resource_defaults("llm", LLM)
    await repo.create_entity("key-1")
    with pytest.raises(ValidationError, match="'parallel' is a concurrency limit") as info:
        await repo.top_up("key-1", "llm", {"parallel": 1})
    assert "raise its max_in_flight" in info.value.reason
    assert await repo.get_buckets("key-1") == []
    with pytest.raises(ValidationError, match="reset_bucket cannot change it"):
        await repo.reset_bucket("key-1", "llm", limits=["parallel"])


async def test_check_availability_knows_what_is_held(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("llm", LLM)
    fresh = await limiter.check_availability("key-1", "llm", {"parallel": 2})
    assert fresh.allowed and fresh.available == {"requests": 100, "parallel": 2}
    async with limiter.acquire("key-1", "llm", {"requests": 1, "parallel": 2}):
        full = await limiter.check_availability("key-1", "llm", {"parallel": 1})
        assert not full.allowed and full.exceeded == ["parallel"]
        assert full.available == {"requests": 99, "parallel": 0}
        assert 0 < full.retry_after_seconds <= 30 + 120  # the lease ttl, plus the skew bound
        assert full.status("parallel").limit == Limit.concurrent("parallel", 2, lease_ttl=30)
        never = await limiter.check_availability("key-1", "llm", {"parallel": 3})
        assert not never.allowed and never.status("parallel").max_request == 2
    after = await limiter.check_availability("key-1", "llm", {"parallel": 2})
    assert after.allowed and after.available["parallel"] == 2


async def test_a_lease_and_a_rejection_carry_concurrent_requests(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("llm", LLM)
    async with limiter.acquire("key-1", "llm", {"requests": 1, "parallel": 1}) as lease:
        policy, limits = checked(ratelimit_headers(lease))
        assert policy["llm.parallel"] == {"q": 2, "qu": "concurrent-requests"}
        assert limits["llm.parallel"] == {"r": 1}
        async with limiter.acquire("key-2", "llm", {"parallel": 2}):
            pass  # another key: its own limit
        async with limiter.acquire("key-1", "llm", {"parallel": 1}):
            with pytest.raises(RateLimitExceeded) as info:
                async with limiter.acquire("key-1", "llm", {"requests": 1, "parallel": 1}):
                    pass
    exc = info.value
    assert [v.limit_name for v in exc.violations] == ["parallel"]
    assert 0 < exc.retry_after_seconds <= 30 + 120
    headers = ratelimit_headers(exc, now_ms=clock())
    policy, limits = checked(headers)
    assert policy["llm.parallel"] == {"q": 2, "qu": "concurrent-requests"}
    assert limits["llm.parallel"] == {"r": 0}


async def test_a_reset_leaves_what_is_held_alone(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("llm", LLM)
    await limiter.repository.create_entity("key-1")
    async with limiter.acquire("key-1", "llm", {"requests": 10, "parallel": 2}):
        result = await limiter.repository.reset_bucket("key-1", "llm")
        assert set(result.amounts) == {"requests"}
        assert await limiter.available("key-1", "llm") == {"requests": 100, "parallel": 0}
    assert await limiter.available("key-1", "llm") == {"requests": 100, "parallel": 2}
