"""A small search service limited by zae-limiter: Starlette, served by `uvicorn module:app`.

The limiter is opened in the app's lifespan (`limiter_lifespan`), not at import time, and closed
when the server stops; the middleware finds it there. Each caller is named by its `X-Api-Key`
header; requests without one are not limited, nor is `/health`. One middleware maps each route
to what it costs (`routes=`): a search costs one `rpm`, and the handler then adjusts `results`
by what it really returned. Run it on DynamoDB Local:

    eval "$(zae-limiter local env)"
    uvicorn --app-dir examples asgi_service:app --port 8080   # or:
    python examples/asgi_service.py --port 8080              # 0 (the default): a free port

The limits below are set as the resource's defaults only when it has none: limits an operator
set (`zae-limiter resource set-defaults search ...`) are kept. The test
`tests/integrations/test_asgi_middleware.py` serves this app over HTTP on 127.0.0.1.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from starlette import routing
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.integrations.asgi import RateLimitMiddleware, Route, limiter_lifespan

LIMITS = [Limit.per_minute("rpm", 10), Limit.per_minute("results", 1_000)]


def api_key(scope: dict[str, Any]) -> str | None:
    """The entity to limit: the caller's API key (None: not limited)."""
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            return value.decode("latin-1")
    return None


async def search(request: Request) -> JSONResponse:
    """Answers 10 results, and bills them on the caller's lease."""
    results = [f"result-{i}" for i in range(10)]
    lease = getattr(request.state, "zae_lease", None)  # None when the request is not limited
    if lease is not None:
        await lease.adjust(results=len(results))
    return JSONResponse({"results": results})


async def health(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


async def open_limiter(**repository: Any) -> RateLimiter:
    """Open the limiter (at startup), giving `search` its limits unless it has some."""
    limiter = RateLimiter(await Repository.open(**repository))
    if not await limiter.get_resource_defaults("search"):
        await limiter.set_resource_defaults("search", LIMITS)
    return limiter


def build_app(opener: Callable[[], Awaitable[RateLimiter]] = open_limiter) -> Starlette:
    """The service; `opener` opens its limiter when the server starts."""
    return Starlette(
        routes=[routing.Route("/search", search), routing.Route("/health", health)],
        middleware=[
            Middleware(
                RateLimitMiddleware,
                entity=api_key,
                routes={"/search": Route("search", {"rpm": 1}), "/health": None},
                timeout=1.0,  # the service's own deadline per admission
            )
        ],
        lifespan=limiter_lifespan(opener),
    )


app = build_app()  # `uvicorn asgi_service:app`: nothing is opened until the server starts


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (the log says which)")
    args = parser.parse_args(argv)
    uvicorn.run(app, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
