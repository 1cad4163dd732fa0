"""A full concurrency limit in HTTP answers (zae_limiter.integrations.headers,
docs/concurrency.md): its
`RateLimit-Policy` item is in `concurrent-requests` with no `w`, the 429 body says the
violation is about work in flight, and the operator's body names its lease. Pure: the
rejection is built from statuses as the acquire path reports them."""

from __future__ import annotations

from support.ratelimit_fields import checked
from zae_limiter import Limit, RateLimitExceeded
from zae_limiter.integrations.headers import problem_details, ratelimit_headers
from zae_limiter.models import LimitStatus

PARALLEL = Limit.concurrent("parallel", 4, lease_ttl=30)
REQUESTS = Limit.per_minute("requests", 60)


def full_parallel() -> RateLimitExceeded:
    return RateLimitExceeded(
        [
            LimitStatus("key-1", "llm", "requests", REQUESTS, 57, 1, False, 0.0),
            LimitStatus("key-1", "llm", "parallel", PARALLEL, 0, 1, True, 12.5, max_request=4),
        ]
    )


def test_the_policy_is_in_concurrent_requests_with_no_w() -> None:
    exc = full_parallel()
    headers = ratelimit_headers(exc, now_ms=0)
    policy, limits = checked(headers)
    assert headers["Retry-After"] == "13"
    assert policy["llm.parallel"] == {"q": 4, "qu": "concurrent-requests"}
    assert limits["llm.parallel"] == {"r": 0}  # no `t`: a hold comes back when its lease ends
    assert policy["llm.requests"] == {"q": 60, "w": 60}
    # a caller's own unit still wins
    policy, _ = checked(ratelimit_headers(exc, now_ms=0, units={"parallel": "streams"}))
    assert policy["llm.parallel"] == {"q": 4, "zael-unit": "streams"}


def test_the_429_body_says_too_much_is_in_flight() -> None:
    body = problem_details(full_parallel())
    assert body["status"] == 429 and body["violated-policies"] == ["llm.parallel"]
    assert body["violations"] == [
        {"resource": "llm", "limit_name": "parallel", "parent": False, "concurrent": True}
    ]
    assert body["detail"] == "Rate limit exceeded for llm.parallel (in flight)"
    assert body["retry_after_seconds"] == 12.5


def test_the_operators_body_names_the_lease_not_a_refill() -> None:
    limits = full_parallel().as_dict()["limits"]
    parallel = next(s for s in limits if s["limit_name"] == "parallel")
    assert parallel["kind"] == "concurrent" and parallel["lease_ttl_seconds"] == 30
    assert "refill_amount" not in parallel and "resets_at_ms" not in parallel
    assert parallel["capacity"] == 4 and parallel["available"] == 0
