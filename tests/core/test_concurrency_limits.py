"""What surrounds the acquire path of a concurrency limit (docs/concurrency.md): top-up and
reset, `check_availability`, the RateLimit headers of a lease; against DynamoDB Local."""

from __future__ import annotations

import pytest

from zae_limiter import Limit, RateLimiter, ValidationError

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
