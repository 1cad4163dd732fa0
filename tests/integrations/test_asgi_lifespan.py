"""`limiter_lifespan` under uvicorn with its lifespan on, as `uvicorn module:app` runs an app:
Starlette (examples/asgi_service.py) and FastAPI open the limiter at startup, the middleware finds
it without `limiter=`, and shutdown closes it. An outage is a 503 problem with `Retry-After`."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from fastapi import FastAPI, Request

from support.asgi_server import load_example, serving
from support.clock import FakeClock
from support.faultproxy import fault_proxy
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.integrations.asgi import LIMITER_KEY, RateLimitMiddleware, limiter_lifespan
from zae_limiter.integrations.headers import REDUCED_CAPACITY_TYPE

service = load_example("asgi_service")
KEY = {"X-Api-Key": "key-1"}
Opener = Callable[[], Awaitable[RateLimiter]]


class Opened:
    """An opener that remembers the limiters it opened (to see them closed)."""

    def __init__(self, endpoint_url: str, table: str, clock: FakeClock) -> None:
        self.endpoint_url = endpoint_url
        self.table = table
        self.clock = clock
        self.limiters: list[RateLimiter] = []
        self.closed = 0

    async def __call__(self) -> RateLimiter:
        limiter = await service.open_limiter(
            table=self.table, endpoint_url=self.endpoint_url, clock=self.clock
        )
        assert isinstance(limiter, RateLimiter)
        close = limiter.close

        async def counted_close(timeout: float | None = None) -> None:
            self.closed += 1
            await close(timeout)

        limiter.close = counted_close  # type: ignore[method-assign]
        self.limiters.append(limiter)
        return limiter


def fastapi_app(opener: Opener) -> FastAPI:
    app = FastAPI(lifespan=limiter_lifespan(opener))
    app.add_middleware(
        RateLimitMiddleware, resource="search", entity=service.api_key, consume={"rpm": 1}
    )

    @app.get("/search")
    async def search(request: Request) -> dict[str, Any]:
        lease = getattr(request.state, "zae_lease", None)  # None: not limited
        if lease is not None:
            await lease.adjust(results=10)
        return {"results": ["result-0"]}

    return app


async def twelve_requests(url: str) -> list[int]:
    async with aiohttp.ClientSession() as http:
        statuses = []
        for _ in range(12):
            async with http.get(url + "/search", headers=KEY) as response:
                statuses.append(response.status)
        async with http.get(url + "/search") as response:  # no key: not limited
            statuses.append(response.status)
    return statuses


async def test_the_starlette_example_opens_its_limiter_at_startup(
    table: TableRef, clock: FakeClock
) -> None:
    opened = Opened(table.endpoint_url, table.name, clock)
    app = service.build_app(opened)  # as `uvicorn asgi_service:app`, with this table
    assert opened.limiters == []  # nothing opened at import or build time
    async with serving(app, lifespan="on") as url:
        assert len(opened.limiters) == 1
        statuses = await twelve_requests(url)
    assert statuses == [200] * 10 + [429, 429, 200]
    assert opened.closed == 1  # shutdown closed it
    async with await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, clock=clock
    ) as repo:
        limiter = RateLimiter(repo)
        assert await limiter.available("key-1", "search") == {"rpm": 0, "results": 900}


async def test_the_example_keeps_limits_an_operator_set(table: TableRef, clock: FakeClock) -> None:
    async with await Repository.open(table=table.name, endpoint_url=table.endpoint_url) as repo:
        await repo.set_resource_defaults(
            "search", [Limit.per_minute("rpm", 2), Limit.per_minute("results", 50)]
        )
    opened = Opened(table.endpoint_url, table.name, clock)
    async with serving(service.build_app(opened), lifespan="on") as url:
        statuses = await twelve_requests(url)
    assert statuses == [200] * 2 + [429] * 10 + [200]


async def test_fastapi_with_the_lifespan_and_the_middleware(
    table: TableRef, clock: FakeClock
) -> None:
    opened = Opened(table.endpoint_url, table.name, clock)
    async with serving(fastapi_app(opened), lifespan="on") as url:
        statuses = await twelve_requests(url)
    assert statuses == [200] * 10 + [429, 429, 200]
    assert opened.closed == 1


async def test_a_repository_is_wrapped_and_the_state_holds_the_limiter(
    table: TableRef, clock: FakeClock
) -> None:
    async def open_repository() -> Repository:
        return await Repository.open(table=table.name, endpoint_url=table.endpoint_url)

    async with limiter_lifespan(open_repository)(None) as state:
        limiter = state[LIMITER_KEY]
        assert isinstance(limiter, RateLimiter)
        await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
        async with limiter.acquire("key-1", "search", {"rpm": 1}):
            pass


async def test_without_the_lifespan_the_middleware_says_what_to_do() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called")

    middleware = RateLimitMiddleware(
        app, resource="search", entity=service.api_key, consume={"rpm": 1}
    )
    scope = {"type": "http", "headers": [(b"x-api-key", b"key-1")]}
    try:
        await middleware(scope, None, None)  # type: ignore[arg-type]
    except ValueError as exc:
        assert "limiter_lifespan" in str(exc)
    else:
        raise AssertionError("no limiter: the middleware must refuse")


async def test_an_unreachable_dynamodb_is_a_503_problem_with_retry_after(
    table: TableRef, clock: FakeClock
) -> None:
    """The engine behind a loopback proxy; the proxy closed: every call is refused."""
    async with fault_proxy(table.endpoint_url, seed=1, rate=0.0) as proxy:
        opened = Opened(proxy.url, table.name, clock)
        async with (
            serving(fastapi_app(opened), lifespan="on") as url,
            aiohttp.ClientSession() as http,
        ):
            async with http.get(url + "/search", headers=KEY) as response:
                assert response.status == 200
            await proxy.close()  # from here on, a closed port
            async with http.get(url + "/search", headers=KEY) as response:
                status, headers, body = response.status, response.headers, await response.read()
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert headers["Content-Type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["type"] == REDUCED_CAPACITY_TYPE
    assert (
        problem["type"]
        == "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
    )
    assert problem["status"] == 503
    assert table.name not in body.decode() and "127.0.0.1" not in body.decode()
