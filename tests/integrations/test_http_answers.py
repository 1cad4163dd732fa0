"""RateLimit headers, problem bodies and `as_dict(public=True)`
(zae_limiter.integrations.headers, §3).

Every header is read back with a Structured Fields parser and checked against the draft's
grammar (support/ratelimit_fields.py). Leases come from DynamoDB Local.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from support.clock import FakeClock
from support.ratelimit_fields import checked
from support.tables import TableRef
from zae_limiter import (
    Limit,
    RateLimiter,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
    SyncRateLimiter,
    SyncRepository,
    ValidationError,
)
from zae_limiter.acquire.lease import LeaseState, degraded_lease
from zae_limiter.integrations.headers import partition_key, problem_details, ratelimit_headers


async def rejection(limiter: RateLimiter, *args: object, **kwargs: object) -> RateLimitExceeded:
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire(*args, **kwargs):  # type: ignore[arg-type]
            pass
    return info.value


async def test_a_lease_gets_one_policy_per_limit_of_every_resource_of_the_call(
    limiter: RateLimiter,
) -> None:
    """Draft -11: `t` is the effective window, the seconds within which no more than `r` can be
    used: for a dripping limit, until its next whole unit drips in (rpm 10: 6 s; tokens at
    1000 a minute: under a second). The `also=` resource's limits are described too."""
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("rpm", 10), Limit.per_minute("tokens", 1_000, burst=2_000)]
    )
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 100)])
    async with limiter.acquire(
        "user-1", "search", {"rpm": 1, "tokens": 500}, also={"budget": {"units": 5}}
    ) as lease:
        headers = ratelimit_headers(lease)
    policy, limits = checked(headers)
    assert policy == {
        "search.rpm": {"q": 10, "w": 60},
        "search.tokens": {"q": 2_000, "w": 120},
        "budget.units": {"q": 100, "w": 86_400},
    }
    assert limits == {
        "search.rpm": {"r": 9, "t": 6},
        "search.tokens": {"r": 1_500, "t": 1},  # 60 ms, rounded up
        "budget.units": {"r": 95, "t": 864},
    }
    assert "Retry-After" not in headers


async def test_a_rejection_adds_retry_after_and_never_a_w_past_it(
    limiter: RateLimiter,
) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("rpm", 2), Limit.per_hour("tokens", 3_600)]
    )
    for _ in range(2):
        async with limiter.acquire("user-1", "search", {"rpm": 1, "tokens": 1}):
            pass
    exc = await rejection(limiter, "user-1", "search", {"rpm": 1, "tokens": 1})
    headers = ratelimit_headers(exc)
    retry_after = int(headers["Retry-After"])
    assert headers["Retry-After"] == exc.retry_after_header
    assert 30 <= retry_after <= 31  # one rpm drips back in 30 s
    policy, limits = checked(headers)
    assert policy["search.rpm"] == {"q": 2, "w": 60}
    assert limits["search.rpm"] == {"r": 0, "t": 30}  # no more than 0 until one drips in
    assert limits["search.tokens"] == {"r": 3_598, "t": 1}  # one token a second

    assert all(item["t"] <= int(headers["Retry-After"]) for item in limits.values())


async def test_a_balance_in_debt_is_reported_as_zero_remaining(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("tokens", 100)])
    async with limiter.acquire("user-1", "search", {"tokens": 10}) as lease:
        await lease.adjust(tokens=400)  # adjust never rejects: the balance goes to -310
        in_block = ratelimit_headers(lease)
    # no more than 0 until the balance is back to 1: 311 tokens at 100 a minute (186.6 s)
    assert checked(in_block)[1] == {"search.tokens": {"r": 0, "t": 187}}
    exc = await rejection(limiter, "user-1", "search", {"tokens": 1})
    assert checked(ratelimit_headers(exc))[1]["search.tokens"]["r"] == 0


async def test_quota_policies_carry_their_reset(limiter: RateLimiter, clock: FakeClock) -> None:
    await limiter.set_resource_defaults(
        "budget",
        [
            Limit.quota("weekly", 5_000, cron="0 0 * * 1"),
            Limit.quota("session", 1_000, reset_after=timedelta(hours=5)),
        ],
    )
    async with limiter.acquire("user-1", "budget", {"weekly": 100, "session": 100}) as lease:
        headers = ratelimit_headers(lease)
        availability = await limiter.check_availability("user-1", "budget")
    policy, limits = checked(headers)
    assert policy == {
        "budget.weekly": {"q": 5_000},  # a calendar period has no fixed w
        "budget.session": {"q": 1_000, "w": 18_000},
    }
    weekly_reset = availability.status("weekly").resets_at_ms
    assert weekly_reset is not None
    assert limits["budget.weekly"] == {"r": 4_900, "t": -(-(weekly_reset - clock()) // 1000)}
    assert limits["budget.session"] == {"r": 900, "t": 18_000}


async def test_units_map_to_qu_or_the_prefixed_parameter(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults(
        "upload", [Limit.per_minute("bytes", 1_000_000), Limit.per_minute("jobs", 5)]
    )
    async with limiter.acquire("user-1", "upload", {"bytes": 10, "jobs": 1}) as lease:
        headers = ratelimit_headers(lease, units={"bytes": "content-bytes", "jobs": "requests"})
    policy, _ = checked(headers)
    assert policy["upload.bytes"]["qu"] == "content-bytes"
    assert "qu" not in policy["upload.jobs"] and "zael-unit" not in policy["upload.jobs"]
    with pytest.raises(ValidationError, match="printable ASCII"):
        ratelimit_headers(lease, units={"bytes": "octets\u00e9"})


async def test_pk_is_a_keyed_hash_never_the_entity_id(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    async with limiter.acquire("user-1", "search", {"rpm": 1}) as lease:
        plain = ratelimit_headers(lease)
        keyed = ratelimit_headers(lease, pk_secret=b"server secret")
    assert "pk" not in plain["RateLimit"] and "pk" not in plain["RateLimit-Policy"]
    policy, limits = checked(keyed)
    expected = partition_key("user-1", b"server secret")
    assert policy["search.rpm"]["pk"] == limits["search.rpm"]["pk"] == expected
    assert len(expected) == 16 and b"user-1" not in expected
    assert "user-1" not in json.dumps(keyed)


async def test_a_sync_lease_gets_the_same_headers(table: TableRef) -> None:
    repo = SyncRepository.open(table=table.name, endpoint_url=table.endpoint_url)
    limiter = SyncRateLimiter(repo)
    try:
        limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
        with limiter.acquire("user-1", "search", {"rpm": 3}) as lease:
            headers = ratelimit_headers(lease)
    finally:
        limiter.close()
    assert checked(headers)[1]["search.rpm"]["r"] == 7


def test_the_degraded_lease_and_other_values() -> None:
    assert ratelimit_headers(degraded_lease(LeaseState({}))) == {}
    with pytest.raises(TypeError, match="Lease, SyncLease or RateLimitExceeded"):
        ratelimit_headers({"rpm": 1})


# --- public bodies -------------------------------------------------------------------------------


async def cascade(limiter: RateLimiter, repo: Repository) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 1_000)])
    await limiter.create_entity(entity_id="org-secret")
    await limiter.create_entity(entity_id="user-3", parent_id="org-secret")
    await repo.set_resource_cascade("search", True)
    await limiter.set_limits("org-secret", [Limit.per_minute("rpm", 2)], resource="search")


async def test_the_public_body_names_no_parent_capacity_or_other_balance(
    limiter: RateLimiter, repo: Repository
) -> None:
    await cascade(limiter, repo)
    for _ in range(2):
        async with limiter.acquire("user-3", "search", {"rpm": 1}):
            pass
    exc = await rejection(limiter, "user-3", "search", {"rpm": 1}, also={"budget": {"units": 10}})
    private = json.dumps(exc.as_dict())
    assert "org-secret" in private and "budget" in private  # the operator's view has it all
    public = exc.as_dict(public=True)
    assert public == {
        "error": "rate_limit_exceeded",
        "message": "Rate limit exceeded for search.rpm (organisation)",
        "contended": False,
        "retry_after_seconds": exc.retry_after_seconds,
        "retry_after_ms": round(exc.retry_after_seconds * 1000),
        "violations": [{"resource": "search", "limit_name": "rpm", "parent": True}],
    }
    problem = problem_details(exc)
    assert problem == exc.as_problem()  # the body is rendered once, by the refusal itself
    assert problem["type"] == "https://iana.org/assignments/http-problem-types#quota-exceeded"
    # the parent's limit is no policy the headers describe: in violations, not violated-policies
    assert (problem["status"], problem["violated-policies"]) == (429, [])
    headers = ratelimit_headers(exc)
    policy, limits = checked(headers)
    assert policy == {  # the caller's own limits only, on both resources of the call
        "search.rpm": {"q": 100, "w": 60},
        "budget.units": {"q": 1_000, "w": 86_400},
    }
    assert limits["search.rpm"]["r"] == 98
    exposed = json.dumps([public, problem, headers])
    for secret in ("org-secret", "user-3", "q=2", "capacity", "available"):
        assert secret not in exposed


async def test_the_callers_own_violation_on_another_resource(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 100)])
    exc = await rejection(limiter, "user-1", "search", {"rpm": 1}, also={"budget": {"units": 500}})
    assert exc.as_dict(public=True)["violations"] == [
        {"resource": "budget", "limit_name": "units", "parent": False}
    ]
    assert problem_details(exc)["violated-policies"] == ["budget.units"]
    # The headers list the policy that refused, beside the primary resource's own.
    policy, limits = checked(ratelimit_headers(exc))
    assert policy == {
        "search.rpm": {"q": 100, "w": 60},
        "budget.units": {"q": 100, "w": 86400},
    }
    assert limits["search.rpm"]["r"] == 100 and limits["budget.units"]["r"] == 100


async def test_the_same_policies_on_an_admission_and_its_rejection(limiter: RateLimiter) -> None:
    """Issue 42 item 8: a 200 and the 429 of the same call describe the same policies (the
    budget's too), `violated-policies` names only described policies, and a unit follows the
    limit's kind, never its name ("tokens" is not a unit the draft knows: requests, unless
    `units=` says otherwise)."""
    await limiter.set_resource_defaults(
        "search",
        [
            Limit.per_minute("rpm", 100),
            Limit.per_minute("tokens", 10_000),
            Limit.concurrent("parallel", 5),
        ],
    )
    await limiter.set_resource_defaults("budget", [Limit.quota("weekly", 1_000, cron="0 0 * * 1")])
    call = {"rpm": 1, "tokens": 100, "parallel": 1}
    async with limiter.acquire("user-1", "search", call, also={"budget": {"weekly": 600}}) as lease:
        admitted, _ = checked(ratelimit_headers(lease))
    exc = await rejection(limiter, "user-1", "search", call, also={"budget": {"weekly": 600}})
    refused, _ = checked(ratelimit_headers(exc))
    assert admitted == refused
    assert list(admitted) == ["search.rpm", "search.tokens", "search.parallel", "budget.weekly"]
    assert admitted["search.tokens"] == {"q": 10_000, "w": 60}
    assert admitted["search.parallel"] == {"q": 5, "qu": "concurrent-requests"}
    violated = problem_details(exc)["violated-policies"]
    assert violated == ["budget.weekly"] and set(violated) <= set(refused)


async def test_a_disabled_resource_is_a_403_problem_without_whose_flag(
    limiter: RateLimiter, repo: Repository
) -> None:
    await cascade(limiter, repo)
    await repo.disable_entity("org-secret", "search")
    with pytest.raises(ResourceDisabled) as info:
        async with limiter.acquire("user-3", "search", {"rpm": 1}):
            pass
    assert info.value.as_dict()["entity_id"] == "org-secret"
    problem = problem_details(info.value)
    assert problem == info.value.as_problem()
    assert problem == {
        "type": "about:blank",
        "title": "Forbidden",
        "status": 403,
        "detail": "Resource 'search' is disabled for this caller",
        "error": "resource_disabled",
        "message": "Resource 'search' is disabled for this caller",
        "resource": "search",
    }


@pytest.mark.parametrize(
    ("policy", "limit"),
    [
        ('"a.b";q=1', '"a.b";r=-1'),  # r negative
        ('"a.b";q=1;w=0', '"a.b";r=1'),  # w must be positive
        ('"a.b";q=1;qu="tokens"', '"a.b";r=1'),  # qu takes registered units only
        ("a;q=1", "a;r=1"),  # the item must be a String, not a Token
        ('"a.b";w=1', '"a.b";r=1'),  # q is required
        ('"a.b";q=1', '"a.b";r=1;pk="id"'),  # pk is a Byte Sequence
    ],
)
def test_the_grammar_check_itself_refuses_what_the_draft_forbids(policy: str, limit: str) -> None:
    with pytest.raises(AssertionError):
        checked({"RateLimit-Policy": policy, "RateLimit": limit})
