"""What a client that goes away costs under uvicorn (docs/on-unavailable.md, "Client disconnects").

uvicorn does not cancel the app when its client disconnects: a plain handler runs to its end and
its lease exits normally, so the call is billed. A handler that stops billing checks
`request.is_disconnected()` and raises: the middleware's lease is refunded on the exception.
Each client here sends its request and closes its connection 100 ms later, while its handler
works; the counts are what docs/on-unavailable.md reports.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from support.asgi_server import serving
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.integrations.asgi import RateLimitMiddleware

CLIENTS = 8


class ClientGone(Exception):
    """The client disconnected: the handler stops, and the lease is refunded."""


async def plain(request: Request) -> PlainTextResponse:
    await asyncio.sleep(0.5)  # the work, unaware of the client
    return PlainTextResponse("done")


async def checked(request: Request) -> PlainTextResponse:
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


def entity_of(scope: Any) -> str:
    return str(dict(scope["headers"])[b"x-entity"].decode())


async def test_a_client_disconnect_bills_a_plain_handler_and_not_one_that_checks(
    repo: Repository,
) -> None:
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_day("calls", 1_000)])
    app = RateLimitMiddleware(
        Starlette(routes=[Route("/plain", plain), Route("/checked", checked)]),
        limiter=limiter,
        resource="api",
        entity=entity_of,
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
