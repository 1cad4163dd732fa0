"""`RateLimitMiddleware`: admit every HTTP request through `limiter.acquire` (pure ASGI), and
`limiter_lifespan`: open the limiter when the app starts, close it when it stops.

Works under any ASGI server or framework (Starlette, FastAPI, ...) without importing them.
See docs/integrations.md.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from .. import validation
from ..acquire import deadlines
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
from .hold_cancel import cancelled_on_hold_lost

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
#: What a request consumes: a dict, or a callable of the scope returning one.
Amounts = Mapping[str, int] | Callable[[Scope], Mapping[str, int]]
AlsoAmounts = (
    Mapping[str, Mapping[str, int]]
    | Callable[[Scope], Mapping[str, Mapping[str, int]] | None]
    | None
)


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


@dataclass(frozen=True)
class Route:
    """What a request on a route costs: `resource`, `consume` and `also` as for
    `limiter.acquire` (dicts, or callables of the scope returning them)."""

    resource: str
    consume: Amounts
    also: AlsoAmounts = None


class RateLimitMiddleware:
    """Admit before calling the app; add the RateLimit headers to its response; answer a
    rejection (429), a disabled resource (403) or an unavailable limiter (503) with a problem
    body; refund if the app raises.

    `limiter`: the limiter to use; None takes the one `limiter_lifespan` opened, from
    `scope["state"]["zae_limiter"]`. `entity(scope)` names the entity to limit (`None`: the
    request is not limited; it may also return an awaitable). What a request costs: `routes`
    maps a path (`"/search"`: that path and every path below it) or a method and a path
    (`"POST /v1/chat"`) to a `Route` (or None: not limited); the longest match wins, a method's
    over the bare path. A request no route matches costs `resource` with `consume` and `also`
    (dicts, or callables of the scope returning them) when `resource` is given, and is not
    limited otherwise. `routes` may also be a callable of the scope returning a `Route` or None.
    `timeout`: the middleware's own deadline for each admission and each lease's exit (seconds;
    None: as long as resolving takes; default the repository's `acquire_timeout`), past which
    `on_unavailable` decides. `cancel_on_hold_lost`: when a concurrency hold of the request's
    lease is lost (its renewals failed for a `lease_ttl`), cancel the app at once and answer
    503 (or, once the response has started, abort it); the lease is refunded. The app reaches
    the lease at `scope["state"]["zae_lease"]` to `adjust()` once the real cost is known.
    `units` and `pk_secret` are passed to `zae_limiter.integrations.headers.ratelimit_headers`.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limiter: RateLimiter | None = None,
        entity: Callable[[Scope], str | Awaitable[str | None] | None],
        resource: str | None = None,
        consume: Amounts | None = None,
        also: AlsoAmounts = None,
        routes: Mapping[str, Route | None] | Callable[[Scope], Route | None] | None = None,
        timeout: float | deadlines.Default | None = deadlines.DEFAULT,
        on_unavailable: OnUnavailable | None = None,
        cancel_on_hold_lost: bool = False,
        units: Mapping[str, str] | None = None,
        pk_secret: bytes | None = None,
    ) -> None:
        if limiter is not None and not isinstance(limiter, RateLimiter):
            raise TypeError(
                "RateLimitMiddleware needs an async RateLimiter (SyncRateLimiter is for "
                "blocking code such as zae_limiter.integrations.aws_lambda.rate_limited)"
            )
        if resource is None and routes is None:
            raise ValidationError(
                "resource", None, "give resource= (and consume=), or routes=, or both"
            )
        if resource is not None and consume is None:
            raise ValidationError("consume", None, f"give what a request on {resource!r} costs")
        self.app = app
        self.limiter = limiter
        self.entity = entity
        self.fallback = None if resource is None else _checked(Route(resource, consume or {}, also))
        self.routes = routes if callable(routes) else _RouteTable(routes or {})
        if not isinstance(timeout, deadlines.Default):
            timeout = deadlines.timeout_value(timeout, "timeout")
        self.timeout = timeout
        self.on_unavailable = on_unavailable
        self.cancel_on_hold_lost = cancel_on_hold_lost
        self.units = units
        self.pk_secret = pk_secret

    def route(self, scope: Scope) -> Route | None:
        """What the request costs (None: not limited)."""
        found = self.routes(scope)
        return self.fallback if found is _UNMATCHED else found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.route(scope)
        entity_id = None if route is None else self.entity(scope)
        if inspect.isawaitable(entity_id):
            entity_id = await entity_id
        if route is None or entity_id is None:
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
                route.resource,
                resolve_request(route.consume, scope),
                on_unavailable=self.on_unavailable,
                also=resolve_request(route.also, scope),
                timeout=self.timeout,
            ) as lease:
                scope.setdefault("state", {})[LEASE_KEY] = lease
                work = self.app(scope, receive, send_with_headers)
                await (cancelled_on_hold_lost(lease, work) if self.cancel_on_hold_lost else work)
        except PermissionDenied:
            raise  # a misconfiguration, not an outage: the server's 500 (docs/errors.md)
        except (RateLimitExceeded, ResourceDisabled, RateLimiterUnavailable) as exc:
            if started:  # the app's own lease.consume() failed after it began answering
                raise
            status, headers, body = error_response(exc, units=self.units, pk_secret=self.pk_secret)
            headers["Content-Length"] = str(len(body))
            await send({"type": "http.response.start", "status": status, "headers": _raw(headers)})
            await send({"type": "http.response.body", "body": body})


#: A route table's answer when no route matches (the middleware's own resource applies).
_UNMATCHED = Route("", {})


class _RouteTable:
    """`routes` as a mapping: the longest path prefix (whole segments) wins, a method's over
    the bare path; `_UNMATCHED` when none matches."""

    def __init__(self, routes: Mapping[str, Route | None]) -> None:
        self.by_key: dict[tuple[str, str], Route | None] = {}
        for key, route in routes.items():
            method, _, path = key.strip().rpartition(" ")
            if not path.startswith("/") or (method and not method.isalpha()):
                raise ValidationError(
                    "routes",
                    key,
                    'a route is a path ("/search") or a method and a path ("POST /v1/chat")',
                )
            if route is not None and not isinstance(route, Route):
                raise ValidationError("routes", key, "map it to a Route(...) or None")
            self.by_key[method.upper(), path.rstrip("/") or "/"] = (
                None if route is None else _checked(route)
            )

    def __call__(self, scope: Scope) -> Route | None:
        path = scope.get("path", "/").rstrip("/") or "/"
        method = scope.get("method", "GET").upper()
        while True:
            for key in ((method, path), ("", path)):
                if key in self.by_key:
                    return self.by_key[key]
            if path == "/":
                return _UNMATCHED
            path = path.rpartition("/")[0] or "/"


def _checked(route: Route) -> Route:
    """A route whose names and fixed amounts are valid (checked before any request)."""
    validation.resource_name(route.resource)
    if not callable(route.consume):
        validation.amounts(route.consume, "consume")
    if route.also is not None and not callable(route.also):
        if not isinstance(route.also, Mapping):
            raise ValidationError("also", route.also, "must be a dict of resource to amounts")
        for name, amounts in route.also.items():
            validation.resource_name(name, field="also")
            validation.amounts(amounts, f"also[{name!r}]")
    return route


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
