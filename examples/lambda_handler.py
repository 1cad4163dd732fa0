"""A Lambda handler behind API Gateway or an ALB, limited by zae-limiter.

Powertools' event handler routes the request; `rate_limited` admits it first (one `rpm` per
call, the caller named by its `x-api-key` header), answers 429/403 itself, and adds the
RateLimit headers to the route's response. The route bills what it returned with
`current_lease(SyncLease).adjust(...)`.

In the function, build it once at cold start:

    handler = build_handler(SyncRateLimiter(SyncRepository.open()))

The test `tests/integrations/test_examples.py` drives it with API Gateway REST, HTTP API and
ALB events.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import (
    ALBResolver,
    APIGatewayHttpResolver,
    APIGatewayRestResolver,
)

from zae_limiter import Limit, SyncLease, SyncRateLimiter
from zae_limiter.integrations.aws_lambda import current_lease, rate_limited

LIMITS = [Limit.per_minute("rpm", 10), Limit.per_minute("results", 1_000)]
RESOLVERS = {"rest": APIGatewayRestResolver, "http": APIGatewayHttpResolver, "alb": ALBResolver}


def api_key(event: dict[str, Any]) -> str | None:
    """The entity to limit: the caller's API key (None: not limited)."""
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    return headers.get("x-api-key")


def build_handler(limiter: SyncRateLimiter, integration: str = "rest") -> Any:
    app = RESOLVERS[integration]()

    @app.get("/search")
    def search() -> dict[str, Any]:
        results = [f"result-{i}" for i in range(10)]
        current_lease(SyncLease).adjust(results=len(results))  # a no-op when not limited
        return {"results": results}

    @rate_limited(limiter, resource="search", entity=api_key, consume={"rpm": 1})
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return app.resolve(event, context)

    return handler
