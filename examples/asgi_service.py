"""A small ASGI search service limited by zae-limiter (pure ASGI: no framework needed).

Each caller is named by its `X-Api-Key` header; requests without one are not limited (a health
check, say). Every request costs one `rpm`; the handler then adjusts `results` by what it
really returned. Run it on DynamoDB Local:

    eval "$(zae-limiter local env)" && python examples/asgi_service.py

The test `tests/integrations/test_examples.py` drives it over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.asgi import LEASE_KEY, RateLimitMiddleware

LIMITS = [Limit.per_minute("rpm", 10), Limit.per_minute("results", 1_000)]


def api_key(scope: dict[str, Any]) -> str | None:
    """The entity to limit: the caller's API key (None: not limited)."""
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            return value.decode("latin-1")
    return None


async def search(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The application: answers 10 results, and bills them on the caller's lease."""
    lease = scope.get("state", {}).get(LEASE_KEY)
    results = [f"result-{i}" for i in range(10)]
    if lease is not None:
        await lease.adjust(results=len(results))
    body = json.dumps({"results": results}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def build_app(limiter: RateLimiter) -> RateLimitMiddleware:
    return RateLimitMiddleware(
        search, limiter=limiter, resource="search", entity=api_key, consume={"rpm": 1}
    )


async def main(host: str = "127.0.0.1", port: int = 8000) -> None:
    import uvicorn

    repo = await Repository.open()
    async with RateLimiter(repo) as limiter:
        await limiter.set_resource_defaults("search", LIMITS)
        config = uvicorn.Config(build_app(limiter), host=host, port=port, lifespan="off")
        await uvicorn.Server(config).serve()


if __name__ == "__main__":
    asyncio.run(main())
