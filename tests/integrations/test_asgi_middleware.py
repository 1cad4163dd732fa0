"""`RateLimitMiddleware` over real HTTP: uvicorn on 127.0.0.1, aiohttp as the client, the
limiter on DynamoDB Local (examples/asgi_service.py and small apps of the tests' own)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route as StarletteRoute

from support.asgi_server import load_example, serving
from support.clock import FakeClock
from support.faultproxy import limiter_behind_proxy
from support.ratelimit_fields import checked
from support.tables import TableRef
from zae_limiter import Limit, OnUnavailable, RateLimiter, Repository, ValidationError
from zae_limiter.integrations.asgi import LEASE_KEY, RateLimitMiddleware, Route

service = load_example("asgi_service")
KEY = {"X-Api-Key": "key-1"}


async def answer(send: Any, status: int = 200, body: bytes = b"ok") -> None:
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def plain_app(scope: Any, receive: Any, send: Any) -> None:
    await answer(send)


async def fetch(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, Any, bytes]:
    async with http.get(url, **kwargs) as response:
        return response.status, response.headers, await response.read()


async def test_sixty_requests_at_ten_a_minute_admit_exactly_ten(
    limiter: RateLimiter, table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The count is the limit's, not this machine's speed: on a loaded machine a 1 s deadline
    # sheds a request whose predecessor's exit write is still in flight (a 503; seen once).
    monkeypatch.setenv("ZAEL_ACQUIRE_TIMEOUT", "30")

    async def opener() -> RateLimiter:  # the example's own (its lifespan), on the test's clock
        opened: RateLimiter = await service.open_limiter(
            table=table.name, endpoint_url=table.endpoint_url, clock=clock
        )
        return opened

    statuses: list[int] = []
    app = service.build_app(opener)
    async with serving(app, lifespan="on") as url, aiohttp.ClientSession() as http:
        for _ in range(60):
            status, headers, body = await fetch(http, url + "/search", headers=KEY)
            statuses.append(status)
            policy, limits = checked(headers)
            assert policy["search.rpm"] == {"q": 10, "w": 60}
            if status == 200:
                assert json.loads(body)["results"][0] == "result-0"
                assert "Retry-After" not in headers
                continue
            assert status == 429
            assert headers["Content-Type"] == "application/problem+json"
            assert headers["Retry-After"] == "7"  # one rpm drips back every 6 s (+1 ms)
            assert limits["search.rpm"]["r"] == 0
            problem = json.loads(body)
            assert problem["violated-policies"] == ["search.rpm"]
            assert problem["status"] == 429 and "key-1" not in body.decode()
    assert (statuses.count(200), statuses.count(429)) == (10, 50)
    assert statuses[:10] == [200] * 10
    # The app billed 10 results per admitted request through the lease.
    assert (await limiter.available("key-1", "search"))["results"] == 1_000 - 10 * 10


async def test_the_headers_count_down_and_also_is_debited_per_request(
    limiter: RateLimiter,
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("units", 1_000)])

    async def entity(scope: Any) -> str | None:  # an awaitable answer is awaited
        key: str | None = service.api_key(scope)
        return key

    def budget(scope: Any) -> dict[str, dict[str, int]]:
        return {"budget": {"units": 5 if scope["path"] == "/big" else 1}}

    app = RateLimitMiddleware(
        plain_app,
        limiter=limiter,
        resource="search",
        entity=entity,
        consume={"rpm": 1},
        also=budget,
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        remaining = []
        for path in ("/", "/big", "/"):
            _, headers, _ = await fetch(http, url + path, headers=KEY)
            policy, limits = checked(headers)
            assert list(policy) == ["search.rpm", "budget.units"]  # every resource of the call
            remaining.append((limits["search.rpm"]["r"], limits["budget.units"]["r"]))
    assert remaining == [(9, 999), (8, 994), (7, 993)]
    assert await limiter.available("key-1", "budget") == {"units": 1_000 - 7}


async def test_a_warm_acquire_through_the_middleware_is_one_round_trip(
    limiter: RateLimiter, wire: Any
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    app = RateLimitMiddleware(
        plain_app, limiter=limiter, resource="search", entity=service.api_key, consume={"rpm": 1}
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        await fetch(http, url, headers=KEY)  # cold: config and bucket reads
        with wire.block() as warm:
            status, _, _ = await fetch(http, url, headers=KEY)
    assert status == 200
    assert (warm.round_trips, warm.rcu, warm.wcu) == (1, 0, 1)


async def test_a_disabled_resource_is_answered_403(limiter: RateLimiter, repo: Repository) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    await repo.disable_resource("search")
    app = RateLimitMiddleware(
        plain_app, limiter=limiter, resource="search", entity=service.api_key, consume={"rpm": 1}
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        status, headers, body = await fetch(http, url, headers=KEY)
    assert status == 403
    assert headers["Content-Type"] == "application/problem+json"
    assert json.loads(body)["resource"] == "search"
    assert "RateLimit" not in headers


async def test_an_exception_in_the_app_refunds(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("tokens", 1_000)])

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        await scope["state"][LEASE_KEY].adjust(tokens=200)
        raise RuntimeError("the work failed")

    app = RateLimitMiddleware(
        failing,
        limiter=limiter,
        resource="search",
        entity=service.api_key,
        consume=lambda scope: {"tokens": 50},
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        status, _, _ = await fetch(http, url, headers=KEY)
    assert status == 500  # the server's answer to the app's exception
    assert await limiter.available("key-1", "search") == {"tokens": 1_000}


async def test_no_entity_passes_unlimited(limiter: RateLimiter, wire: Any) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
    app = RateLimitMiddleware(
        plain_app, limiter=limiter, resource="search", entity=service.api_key, consume={"rpm": 1}
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        with wire.block() as w:
            answers = [await fetch(http, url) for _ in range(5)]
    assert [status for status, _, _ in answers] == [200] * 5
    assert all("RateLimit" not in headers for _, headers, _ in answers)
    assert w.requests == []


async def test_a_consume_inside_the_app_that_fails_is_a_429(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("tokens", 100)])

    async def greedy(scope: Any, receive: Any, send: Any) -> None:
        await scope["state"][LEASE_KEY].consume(tokens=500)  # more than the bucket holds
        await answer(send)

    app = RateLimitMiddleware(
        greedy, limiter=limiter, resource="search", entity=service.api_key, consume={"tokens": 1}
    )
    async with serving(app) as url, aiohttp.ClientSession() as http:
        status, _, body = await fetch(http, url, headers=KEY)
    assert status == 429
    assert json.loads(body)["violated-policies"] == ["search.tokens"]
    assert await limiter.available("key-1", "search") == {"tokens": 100}  # entry debit refunded


async def test_non_http_scopes_pass_through_and_a_sync_limiter_is_refused(
    limiter: RateLimiter,
) -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    def never(scope: Any) -> str:
        raise AssertionError("entity() is for http scopes")

    middleware = RateLimitMiddleware(
        app, limiter=limiter, resource="search", entity=never, consume={"rpm": 1}
    )
    await middleware({"type": "lifespan"}, None, None)  # type: ignore[arg-type]
    assert seen == ["lifespan"]
    with pytest.raises(TypeError, match="async RateLimiter"):
        RateLimitMiddleware(app, limiter=object(), resource="s", entity=never, consume={})  # type: ignore[arg-type]


async def test_an_outage_under_allow_passes_with_a_degraded_lease(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    leases: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        leases.append(scope["state"][LEASE_KEY])
        await answer(send)

    def middleware(mode: OnUnavailable | None) -> RateLimitMiddleware:
        return RateLimitMiddleware(
            app,
            limiter=limiter,
            resource="search",
            entity=service.api_key,
            consume={"rpm": 1},
            on_unavailable=mode,
        )

    await repo.transport.close()  # every DynamoDB call fails from here on
    async with serving(middleware(OnUnavailable.ALLOW)) as url, aiohttp.ClientSession() as http:
        status, headers, _ = await fetch(http, url, headers=KEY)
    assert status == 200 and "RateLimit" not in headers
    assert [lease.degraded for lease in leases] == [True]
    async with serving(middleware(None)) as url, aiohttp.ClientSession() as http:
        status, headers, body = await fetch(http, url, headers=KEY)
    # BLOCK: the middleware answers 503 itself (docs/errors.md); the app never ran.
    assert (status, headers["Retry-After"]) == (503, "1")
    assert json.loads(body)["type"].endswith("#temporary-reduced-capacity")
    assert len(leases) == 1


async def call(app: Any, method: str, path: str, headers: Any = ()) -> tuple[int, dict[Any, Any]]:
    """Drive an ASGI app as a server would, without a socket; (status, headers)."""
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.request", "body": b""}

    scope = {"type": "http", "method": method, "path": path, "headers": list(headers)}
    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"])


async def test_one_middleware_maps_routes_to_resources_and_costs(limiter: RateLimiter) -> None:
    """Issue 42 item 9: routes (a path and what is below it, or a method and a path) each name
    a resource and what a request costs; the longest match wins, a method's first; a route
    mapped to None and an unmatched path (no resource=) are not limited; mistakes are
    ValidationErrors before any request."""
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 2)])
    await limiter.set_resource_defaults("chat", [Limit.per_minute("tokens", 2_000)])
    await limiter.set_resource_defaults("budget", [Limit.per_day("usd", 1_000)])
    seen: list[tuple[str, ...]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        lease = scope.get("state", {}).get(LEASE_KEY)
        seen.append(() if lease is None else lease.resources)
        await answer(send)

    def tokens(scope: Any) -> dict[str, int]:
        return {"tokens": int(dict(scope["headers"]).get(b"x-max-tokens", b"500"))}

    service_app = RateLimitMiddleware(
        app,
        limiter=limiter,
        entity=lambda scope: "key-1",
        routes={
            "/search": Route("search", {"rpm": 1}),
            "/search/admin": None,
            "POST /v1/chat": Route("chat", tokens, also={"budget": {"usd": 10}}),
        },
    )
    big = [(b"x-max-tokens", b"1500")]
    statuses = [
        (await call(service_app, "GET", "/search/items/7"))[0],
        (await call(service_app, "GET", "/search"))[0],
        (await call(service_app, "GET", "/search"))[0],  # rpm 2: refused
        (await call(service_app, "GET", "/search/admin/x"))[0],  # None: not limited
        (await call(service_app, "POST", "/v1/chat/", big))[0],
        (await call(service_app, "POST", "/v1/chat", big))[0],  # 3,000 tokens > 2,000
        (await call(service_app, "GET", "/v1/chat"))[0],  # no route: not limited
    ]
    assert statuses == [200, 200, 429, 200, 200, 429, 200]
    assert seen == [("search",), ("search",), (), ("chat", "budget"), ()]
    assert await limiter.available("key-1", "budget") == {"usd": 990}
    with_default = RateLimitMiddleware(
        app,
        limiter=limiter,
        entity=lambda scope: "key-2",
        resource="search",
        consume={"rpm": 2},
        routes={"/health": None},
    )
    assert [(await call(with_default, "GET", p))[0] for p in ("/x", "/health", "/y")] == [
        200,
        200,
        429,
    ]
    for bad, match in (
        ({"routes": {"search": Route("search", {"rpm": 1})}}, "a path"),
        ({"routes": {"/s": Route("bad name!", {"rpm": 1})}}, "resource"),
        ({"routes": {"/s": Route("s", {"rpm": -1})}}, "consume"),
        ({"routes": {"/s": ("s", {"rpm": 1})}}, "Route"),
        ({"resource": "search"}, "consume"),
        ({}, "routes="),
        ({"resource": "search", "consume": {"rpm": 1}, "timeout": 0}, "timeout"),
    ):
        with pytest.raises(ValidationError, match=match):
            RateLimitMiddleware(app, limiter=limiter, entity=lambda scope: "k", **bad)


async def test_the_middleware_takes_its_own_deadline(table: TableRef) -> None:
    """Issue 42 item 9: `timeout=` bounds each admission whatever the repository's
    `acquire_timeout` (here None: as long as resolving takes). DynamoDB partitioned for longer
    than the test: with the middleware's deadline the request is answered 503 (BLOCK), never
    left waiting on the partition."""
    async with limiter_behind_proxy(table, 3, acquire_timeout=None) as (proxy, limiter):
        await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
        app = RateLimitMiddleware(
            plain_app,
            limiter=limiter,
            entity=lambda scope: "key-1",
            routes={"/search": Route("search", {"rpm": 1})},
            timeout=0.2,
        )
        async with limiter.acquire("key-1", "search", {"rpm": 1}, timeout=None):
            pass  # warm, with no deadline: the config and the bucket are seen
        proxy.partition(600)
        status, headers = await call(app, "GET", "/search")
    assert (status, headers[b"retry-after"]) == (503, b"1")


async def test_cancel_on_hold_lost_cancels_the_app_and_answers_503(table: TableRef) -> None:
    """Issue 42 item 14: with `cancel_on_hold_lost`, a request whose concurrency hold lapses
    (renewals dropped by a partition, the real clock) has its app cancelled at once and is
    answered 503 with the problem body; without it the app would run on, holding nothing."""
    async with limiter_behind_proxy(table, 7) as (proxy, limiter):
        await limiter.set_resource_defaults("llm", [Limit.concurrent("parallel", 2, lease_ttl=1)])
        ran: list[str] = []

        async def generate(scope: Any, receive: Any, send: Any) -> None:
            proxy.partition(600)  # from here on every renewal hangs and is dropped
            try:
                await asyncio.sleep(600)  # a long generation
                ran.append("finished")
            except asyncio.CancelledError:
                ran.append("cancelled")
                raise

        app = RateLimitMiddleware(
            generate,
            limiter=limiter,
            entity=lambda scope: "key-1",
            routes={"/generate": Route("llm", {"parallel": 1})},
            timeout=1.0,
            cancel_on_hold_lost=True,
        )
        async with limiter.acquire("key-1", "llm", {"parallel": 1}, timeout=None):
            pass  # warm, with no deadline: the config and the bucket are seen
        status, headers = await call(app, "POST", "/generate")
    assert (status, ran) == (503, ["cancelled"])
    assert headers[b"content-type"] == b"application/problem+json"


# --- client disconnects (docs/on-unavailable.md, "Client disconnects") -------------------------
# uvicorn does not cancel the app when its client disconnects: a plain handler runs to its end
# and its lease exits normally, so the call is billed. A handler that stops billing checks
# `request.is_disconnected()` and raises: the middleware's lease is refunded on the exception.
# Each client sends its request and closes its connection 100 ms later, while its handler works.

CLIENTS = 8


class ClientGone(Exception):
    """The client disconnected: the handler stops, and the lease is refunded."""


async def unaware_handler(request: Request) -> PlainTextResponse:
    await asyncio.sleep(0.5)  # the work, unaware of the client
    return PlainTextResponse("done")


async def asking_handler(request: Request) -> PlainTextResponse:
    for _ in range(10):  # the work, in steps, asking between them
        if await request.is_disconnected():
            raise ClientGone()
        await asyncio.sleep(0.05)
    return PlainTextResponse("done")


async def abandon(url: str, path: str, entity: str) -> None:
    """Send one request, then close the connection before the answer."""
    host, port = url.removeprefix("http://").split(":")
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Entity: {entity}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await writer.wait_closed()


def entity_header(scope: Any) -> str:
    return str(dict(scope["headers"])[b"x-entity"].decode())


async def test_a_client_disconnect_bills_a_plain_handler_and_not_one_that_checks(
    repo: Repository,
) -> None:
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_day("calls", 1_000)])
    app = RateLimitMiddleware(
        Starlette(
            routes=[
                StarletteRoute("/plain", unaware_handler),
                StarletteRoute("/checked", asking_handler),
            ]
        ),
        limiter=limiter,
        resource="api",
        entity=entity_header,
        consume={"calls": 1},
    )
    async with serving(app) as url:
        await asyncio.gather(
            *(abandon(url, "/plain", "plain-user") for _ in range(CLIENTS)),
            *(abandon(url, "/checked", "checked-user") for _ in range(CLIENTS)),
        )
        await asyncio.sleep(1.0)  # every handler has ended (plain ones after 0.5 s)
    billed = {
        entity: sum(s.total_consumed for s in await repo.get_buckets(entity))
        for entity in ("plain-user", "checked-user")
    }
    assert billed == {"plain-user": CLIENTS, "checked-user": 0}
