"""`rate_limited` with API Gateway REST / HTTP API and ALB events (tests/fixtures/lambda_events),
through examples/lambda_handler.py (Powertools' event handler) and plain handlers, on DynamoDB
Local."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.asgi_server import load_example
from support.clock import FakeClock
from support.faultproxy import fault_proxy
from support.ratelimit_fields import checked
from support.tables import TableRef
from zae_limiter import (
    Lease,
    Limit,
    RateLimiter,
    Repository,
    SyncLease,
    SyncRateLimiter,
    SyncRepository,
    ValidationError,
)
from zae_limiter.integrations.aws_lambda import current_lease, rate_limited
from zae_limiter.integrations.headers import REDUCED_CAPACITY_TYPE

EVENTS = Path(__file__).resolve().parents[1] / "fixtures" / "lambda_events"
INTEGRATIONS = {"rest": "apigw_rest.json", "http": "apigw_http.json", "alb": "alb.json"}
ALB_MULTI_VALUE = "alb_multi_value.json"
example = load_example("lambda_handler")


def event(integration: str, api_key: str | None = "key-1") -> dict[str, Any]:
    name = INTEGRATIONS.get(integration, integration)
    loaded: dict[str, Any] = json.loads((EVENTS / name).read_text())
    for field in ("headers", "multiValueHeaders"):
        headers = loaded.get(field)
        if headers is None:
            continue
        for name in [n for n in headers if n.lower() == "x-api-key"]:
            if api_key is None:
                del headers[name]
            else:
                headers[name] = [api_key] if field == "multiValueHeaders" else api_key
    return loaded


def header(response: dict[str, Any], name: str) -> str | None:
    for key, value in (response.get("headers") or {}).items():
        if key.lower() == name.lower():
            return str(value)
    for key, values in (response.get("multiValueHeaders") or {}).items():
        if key.lower() == name.lower():
            return str(values[0])
    return None


def rate_headers(response: dict[str, Any]) -> dict[str, str]:
    return {
        name: value
        for name in ("RateLimit-Policy", "RateLimit")
        if (value := header(response, name)) is not None
    }


@pytest.fixture
def sync_limiter(table: TableRef, clock: FakeClock) -> Iterator[SyncRateLimiter]:
    repo = SyncRepository.open(table=table.name, endpoint_url=table.endpoint_url, clock=clock)
    limiter = SyncRateLimiter(repo)
    try:
        yield limiter
    finally:
        limiter.close()


@pytest.mark.parametrize("integration", list(INTEGRATIONS))
def test_sixty_requests_at_ten_a_minute_admit_exactly_ten(
    sync_limiter: SyncRateLimiter, integration: str
) -> None:
    sync_limiter.set_resource_defaults("search", example.LIMITS)
    handler = example.build_handler(sync_limiter, integration)
    codes = []
    for _ in range(60):
        response = handler(event(integration), None)
        codes.append(response["statusCode"])
        policy, limits = checked(rate_headers(response))
        assert policy["search.rpm"] == {"q": 10, "w": 60}
        if response["statusCode"] == 200:
            assert json.loads(response["body"])["results"][0] == "result-0"
            assert header(response, "Retry-After") is None
            continue
        assert response["statusCode"] == 429
        assert header(response, "Content-Type") == "application/problem+json"
        assert header(response, "Retry-After") == "7"
        assert limits["search.rpm"]["r"] == 0
        problem = json.loads(response["body"])
        assert problem["violated-policies"] == ["search.rpm"]
        assert "key-1" not in response["body"]
        if integration == "alb":
            assert response["statusDescription"] == "429 Too Many Requests"
    assert (codes.count(200), codes.count(429)) == (10, 50)
    assert codes[:10] == [200] * 10
    # The route billed its 10 results per admitted call through current_lease().
    assert sync_limiter.available("key-1", "search")["results"] == 1_000 - 10 * 10


@pytest.mark.parametrize("integration", list(INTEGRATIONS))
def test_a_disabled_resource_is_answered_403(
    sync_limiter: SyncRateLimiter, integration: str
) -> None:
    sync_limiter.set_resource_defaults("search", example.LIMITS)
    sync_limiter.repository.disable_resource("search")
    response = example.build_handler(sync_limiter, integration)(event(integration), None)
    assert response["statusCode"] == 403
    assert json.loads(response["body"])["resource"] == "search"
    assert header(response, "Content-Type") == "application/problem+json"


def test_an_exception_in_the_handler_refunds(sync_limiter: SyncRateLimiter) -> None:
    sync_limiter.set_resource_defaults("search", [Limit.per_minute("tokens", 1_000)])

    @rate_limited(
        sync_limiter, resource="search", entity=example.api_key, consume=lambda e: {"tokens": 50}
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        lease = current_lease(SyncLease)
        assert lease is not None
        lease.adjust(tokens=100)
        raise RuntimeError("the work failed")

    with pytest.raises(RuntimeError, match="the work failed"):
        handler(event("rest"), None)
    assert sync_limiter.available("key-1", "search") == {"tokens": 1_000}
    assert current_lease() is None


def test_no_entity_passes_unlimited(sync_limiter: SyncRateLimiter) -> None:
    """The example's route calls `current_lease(SyncLease).adjust(...)` on every request: on
    one that is not limited, that lease covers nothing and the call does nothing."""
    sync_limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
    handler = example.build_handler(sync_limiter, "rest")
    responses = [handler(event("rest", api_key=None), None) for _ in range(5)]
    assert [r["statusCode"] for r in responses] == [200] * 5
    assert all(rate_headers(r) == {} for r in responses)


async def test_current_lease_of_a_request_not_limited(
    sync_limiter: SyncRateLimiter, limiter: RateLimiter
) -> None:
    """Issue 42 item 5: the typed form is never None. Not limited: a lease covering nothing
    (not degraded); outside a handler: ValidationError; `current_lease()` keeps None."""
    seen: list[Any] = []

    @rate_limited(sync_limiter, resource="search", entity=lambda e: None, consume={"rpm": 1})
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        lease = current_lease(SyncLease)
        lease.adjust(results=10)
        seen.append((type(lease), lease.resources, lease.degraded, lease.consumed, current_lease()))
        return {"statusCode": 200}

    @rate_limited(limiter, resource="search", entity=lambda e: None, consume={"rpm": 1})
    async def async_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        lease = current_lease(Lease)
        await lease.adjust(results=10)
        seen.append((type(lease), lease.resources, lease.degraded, lease.consumed, current_lease()))
        return {"statusCode": 200}

    handler(event("rest"), None)
    await async_handler(event("rest"), None)
    assert seen == [(SyncLease, (), False, {}, None), (Lease, (), False, {}, None)]
    with pytest.raises(ValidationError, match="outside a handler decorated with rate_limited"):
        current_lease(SyncLease)


@pytest.mark.parametrize("returned", ["headers", "multiValueHeaders", "both"])
def test_a_multi_value_alb_event_is_answered_with_multi_value_headers_only(
    sync_limiter: SyncRateLimiter, returned: str
) -> None:
    """Whatever form the handler used, a target group with multi-value headers gets only
    `multiValueHeaders` back (its own headers kept), admitted or rejected."""
    sync_limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
    own: dict[str, Any] = {}
    if returned in ("headers", "both"):
        own["headers"] = {"X-Seen": "yes"}
    if returned in ("multiValueHeaders", "both"):
        own["multiValueHeaders"] = {"X-Seen": ["yes"], "Set-Cookie": ["a=1", "b=2"]}

    @rate_limited(
        sync_limiter,
        resource="search",
        consume={"rpm": 1},
        entity=lambda e: e["multiValueHeaders"]["x-api-key"][0],
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "body": "ok", **copy.deepcopy(own)}

    admitted = handler(event(ALB_MULTI_VALUE), None)
    rejected = handler(event(ALB_MULTI_VALUE), None)
    for response in (admitted, rejected):
        assert "headers" not in response, response
    assert admitted["multiValueHeaders"]["X-Seen"] == ["yes"]
    assert checked(rate_headers(admitted))[1]["search.rpm"]["r"] == 0
    assert rejected["statusCode"] == 429
    assert rejected["statusDescription"] == "429 Too Many Requests"
    assert rejected["multiValueHeaders"]["Retry-After"] == ["61"]


def test_a_single_value_alb_event_is_answered_with_headers_only(
    sync_limiter: SyncRateLimiter,
) -> None:
    sync_limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 5)])

    @rate_limited(sync_limiter, resource="search", entity=example.api_key, consume={"rpm": 1})
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 200, "multiValueHeaders": {"X-Seen": ["yes"]}, "body": "ok"}

    admitted = handler(event("alb"), None)
    assert "multiValueHeaders" not in admitted
    assert admitted["headers"]["X-Seen"] == "yes"
    assert checked(rate_headers(admitted))[1]["search.rpm"]["r"] == 4


def test_an_http_api_handler_returning_a_plain_value(sync_limiter: SyncRateLimiter) -> None:
    sync_limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 5)])

    @rate_limited(sync_limiter, resource="search", entity=example.api_key, consume={"rpm": 1})
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"results": []}  # payload 2.0 infers a 200 JSON answer from any value

    response = handler(event("http"), None)
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"results": []}
    assert checked(rate_headers(response))[1]["search.rpm"]["r"] == 4


async def test_an_async_handler_with_the_async_limiter(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])

    @rate_limited(limiter, resource="search", entity=example.api_key, consume={"rpm": 1})
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        assert current_lease(Lease) is not None
        return {"statusCode": 200, "headers": {"X-Seen": "yes"}, "body": "ok"}

    admitted = await handler(event("rest"), None)
    rejected = await handler(event("rest"), None)
    assert admitted["headers"]["X-Seen"] == "yes"
    assert checked(rate_headers(admitted))[1]["search.rpm"]["r"] == 0
    assert rejected["statusCode"] == 429 and header(rejected, "Retry-After") == "61"


async def test_an_unreachable_dynamodb_is_a_503_with_retry_after(table: TableRef) -> None:
    """The engine behind a loopback proxy, then the proxy closed: every call is refused."""
    async with fault_proxy(table.endpoint_url, seed=1, rate=0.0) as proxy:
        repo = await Repository.open(table=table.name, endpoint_url=proxy.url)
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])

        @rate_limited(limiter, resource="search", entity=example.api_key, consume={"rpm": 1})
        async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            return {"statusCode": 200, "body": "ok"}

        assert (await handler(event("alb"), None))["statusCode"] == 200
        await proxy.close()  # from here on, a closed port
        responses = [await handler(event(kind), None) for kind in ("rest", "alb")]
        await repo.close()
    for response in responses:
        assert response["statusCode"] == 503
        assert header(response, "Retry-After") == "1"
        assert header(response, "Content-Type") == "application/problem+json"
        problem = json.loads(response["body"])
        assert problem["type"] == REDUCED_CAPACITY_TYPE and problem["status"] == 503
        assert table.name not in response["body"]
    assert responses[1]["statusDescription"] == "503 Service Unavailable"


async def test_cancel_on_hold_lost_cancels_an_async_handler(table: TableRef) -> None:
    """Issue 42 item 14: an async handler whose concurrency hold lapses (renewals dropped by a
    partition) is cancelled at once and answered 503; a plain handler cannot be interrupted,
    so asking for it there is a TypeError."""
    async with fault_proxy(table.endpoint_url, seed=9, rate=0.0) as proxy:
        repo = await Repository.open(table=table.name, endpoint_url=proxy.url, acquire_timeout=0.5)
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("llm", [Limit.concurrent("parallel", 2, lease_ttl=1)])
        ran: list[str] = []

        @rate_limited(
            limiter,
            resource="llm",
            entity=example.api_key,
            consume={"parallel": 1},
            cancel_on_hold_lost=True,
        )
        async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            proxy.partition(600)  # from here on every renewal hangs and is dropped
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError:
                ran.append("cancelled")
                raise
            return {"statusCode": 200, "body": "done"}

        try:
            async with limiter.acquire("key-1", "llm", {"parallel": 1}, timeout=None):
                pass  # warm, with no deadline: the config and the bucket are seen
            response = await handler(event("rest"), None)
        finally:  # (its renewals and exit write would go on into the next tests' requests)
            await repo.close(timeout=1.0)
    assert (response["statusCode"], ran) == (503, ["cancelled"])
    with pytest.raises(TypeError, match="async def handler"):
        rate_limited(
            limiter,
            resource="llm",
            entity=example.api_key,
            consume={"parallel": 1},
            cancel_on_hold_lost=True,
        )(lambda event, context: None)


def test_the_limiter_must_match_the_handler(
    sync_limiter: SyncRateLimiter, repo: Repository
) -> None:
    with pytest.raises(TypeError, match="SyncRateLimiter"):
        rate_limited(RateLimiter(repo), resource="s", entity=example.api_key, consume={})(
            lambda event, context: None
        )

    async def coroutine_handler(event: Any, context: Any) -> None:
        return None

    with pytest.raises(TypeError, match="async RateLimiter"):
        rate_limited(sync_limiter, resource="s", entity=example.api_key, consume={})(
            coroutine_handler
        )
