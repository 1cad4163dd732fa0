"""`RateLimitMiddleware`: admit every HTTP request through `limiter.acquire` (pure ASGI), and
`limiter_lifespan`: open the limiter when the app starts, close it when it stops.

Works under any ASGI server or framework (Starlette, FastAPI, ...) without importing them.
See docs/integrations.md.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from ..errors import (
    PermissionDenied,
    RateLimiterUnavailable,
    RateLimitExceeded,
    ResourceDisabled,
    ValidationError,
)
from ..limiter import RateLimiter
from ..models import OnUnavailable
from ..repository import Repository
from .headers import error_response, ratelimit_headers, resolve_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The lease is at `scope["state"][LEASE_KEY]` (Starlette: `request.state.zae_lease`).
LEASE_KEY = "zae_lease"
#: `limiter_lifespan` puts the limiter at `scope["state"][LIMITER_KEY]` of every request.
LIMITER_KEY = "zae_limiter"

Opener = Callable[[], Awaitable[RateLimiter | Repository]]


def limiter_lifespan(
    open_limiter: Opener,
) -> Callable[[Any], contextlib.AbstractAsyncContextManager[dict[str, Any]]]:
    """A Starlette/FastAPI `lifespan=`: `await open_limiter()` when the app starts (a
    `RateLimiter`, or a `Repository` to wrap in one), `close()` it when the app stops.

    It yields the lifespan state `{"zae_limiter": limiter}`: the server copies it into every
    request's `scope["state"]`, where a `RateLimitMiddleware` built without `limiter=` finds it
    (Starlette: `request.state.zae_limiter`). Nothing is opened at import time, so
    `uvicorn module:app` works as is.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
        opened = await open_limiter()
        limiter = RateLimiter(opened) if isinstance(opened, Repository) else opened
        try:
            yield {LIMITER_KEY: limiter}
        finally:
            await limiter.close()

    return lifespan


class RateLimitMiddleware:
    """Admit before calling the app; add the RateLimit headers to its response; answer a
    rejection (429), a disabled resource (403) or an unavailable limiter (503) with a problem
    body; refund if the app raises.

    `limiter`: the limiter to use; None takes the one `limiter_lifespan` opened, from
    `scope["state"]["zae_limiter"]`. `entity(scope)` names the entity to limit (`None`: the
    request is not limited; it may also return an awaitable). `consume` and `also` are dicts,
    or callables of the scope returning them. The app reaches the lease at
    `scope["state"]["zae_lease"]` to `adjust()` once the real cost is known. `units` and
    `pk_secret` are passed to `zae_limiter.integrations.headers.ratelimit_headers`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter | None = None,
        resource: str,
        entity: Callable[[Scope], str | Awaitable[str | None] | None],
        consume: Mapping[str, int] | Callable[[Scope], Mapping[str, int]],
        also: Mapping[str, Mapping[str, int]]
        | Callable[[Scope], Mapping[str, Mapping[str, int]] | None]
        | None = None,
        on_unavailable: OnUnavailable | None = None,
        units: Mapping[str, str] | None = None,
        pk_secret: bytes | None = None,
    ) -> None:
        if limiter is not None and not isinstance(limiter, RateLimiter):
            raise TypeError(
                "RateLimitMiddleware needs an async RateLimiter (SyncRateLimiter is for "
                "blocking code such as zae_limiter.integrations.aws_lambda.rate_limited)"
            )
        self.app = app
        self.limiter = limiter
        self.resource = resource
        self.entity = entity
        self.consume = consume
        self.also = also
        self.on_unavailable = on_unavailable
        self.units = units
        self.pk_secret = pk_secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        entity_id = self.entity(scope)
        if inspect.isawaitable(entity_id):
            entity_id = await entity_id
        if entity_id is None:
            await self.app(scope, receive, send)
            return
        started = False
        lease: Any = None

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                extra = ratelimit_headers(lease, units=self.units, pk_secret=self.pk_secret)
                message = {**message, "headers": [*message.get("headers", ()), *_raw(extra)]}
            await send(message)

        limiter = self.limiter if self.limiter is not None else _lifespan_limiter(scope)
        try:
            async with limiter.acquire(
                entity_id,
                self.resource,
                resolve_request(self.consume, scope),
                on_unavailable=self.on_unavailable,
                also=resolve_request(self.also, scope),
            ) as lease:
                scope.setdefault("state", {})[LEASE_KEY] = lease
                await self.app(scope, receive, send_with_headers)
        except PermissionDenied:
            raise  # a misconfiguration, not an outage: the server's 500 (docs/errors.md)
        except (RateLimitExceeded, ResourceDisabled, RateLimiterUnavailable) as exc:
            if started:  # the app's own lease.consume() failed after it began answering
                raise
            status, headers, body = error_response(exc, units=self.units, pk_secret=self.pk_secret)
            headers["Content-Length"] = str(len(body))
            await send({"type": "http.response.start", "status": status, "headers": _raw(headers)})
            await send({"type": "http.response.body", "body": body})


def _lifespan_limiter(scope: Scope) -> RateLimiter:
    limiter = scope.get("state", {}).get(LIMITER_KEY)
    if not isinstance(limiter, RateLimiter):
        raise ValidationError(
            "limiter",
            limiter,
            "RateLimitMiddleware was built without limiter= and the request's state has none: "
            "serve the app with "
            "lifespan=zae_limiter.integrations.asgi.limiter_lifespan(...) (and the server's "
            "lifespan on), or pass limiter=",
        )
    return limiter


def _raw(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
