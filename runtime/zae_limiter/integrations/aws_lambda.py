"""`rate_limited`: a decorator for Lambda handlers behind API Gateway (REST, HTTP API) or an ALB.

The handler runs only when `limiter.acquire` admits; its proxy-format response gets the
RateLimit headers; a rejection is answered 429 (a disabled resource 403, an unavailable limiter
503 with `Retry-After`) with the headers and a problem body. `current_lease(SyncLease)` (or
`current_lease(Lease)`) gives the handler its lease to `adjust()`. Works with a plain handler
and with Powertools' event handler (`return app.resolve(event, context)`).
See docs/integrations.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar, overload

from .. import syncgen
from ..acquire.lease import Lease, unlimited_lease
from ..errors import (
    PermissionDenied,
    RateLimiterUnavailable,
    RateLimitExceeded,
    ResourceDisabled,
    ValidationError,
)
from ..limiter import RateLimiter
from ..sync import SyncRateLimiter
from ..sync_lease import SyncLease
from .headers import Refusal, error_response, ratelimit_headers, resolve_request
from .hold_cancel import cancelled_on_hold_lost

Event = dict[str, Any]
Handler = TypeVar("Handler", bound=Callable[..., Any])

AnyLease = TypeVar("AnyLease", Lease, SyncLease)

_LEASE: contextvars.ContextVar[Lease | SyncLease | None] = contextvars.ContextVar(
    "zae_limiter_lease", default=None
)
#: Whether a `rate_limited` handler is running (its request limited or not).
_HANDLING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "zae_limiter_handling", default=False
)

_REASONS = {403: "Forbidden", 429: "Too Many Requests", 503: "Service Unavailable"}
_REFUSALS = (RateLimitExceeded, ResourceDisabled, RateLimiterUnavailable)


@overload
def current_lease() -> Lease | SyncLease | None: ...
@overload
def current_lease(kind: type[AnyLease]) -> AnyLease: ...
def current_lease(kind: type[Any] | None = None) -> Lease | SyncLease | None:
    """The lease of the request being handled.

    `current_lease(SyncLease)` (or `current_lease(Lease)` in an `async def` handler) is typed
    and never None: for a request that is not limited (the entity function returned None) it is
    a lease that covers nothing, whose `adjust()`, `consume()` and `release()` do nothing. It
    raises `ValidationError` outside a `rate_limited` handler, and `TypeError` if the handler's
    limiter gives the other kind. `current_lease()` alone is `Lease | SyncLease | None`: None
    outside a handler and for a request that is not limited."""
    lease = _LEASE.get()
    if kind is None:
        return lease
    if lease is None:
        if not _HANDLING.get():
            raise ValidationError(
                "current_lease",
                kind.__name__,
                "is called outside a handler decorated with rate_limited: call it from the "
                "handler (or code it calls)",
            )
        unlimited = unlimited_lease()
        if kind is Lease:
            return unlimited
        synced: SyncLease = syncgen.wrap(unlimited)
        return synced
    if not issubclass(type(lease), kind):
        raise TypeError(
            f"current_lease({kind.__name__}): this handler's lease is a {type(lease).__name__}"
        )
    return lease


@contextlib.contextmanager
def _holding(lease: Lease | SyncLease | None) -> Iterator[None]:
    """`current_lease()` is `lease` inside the block (None: the request is not limited)."""
    token, handling = _LEASE.set(lease), _HANDLING.set(True)
    try:
        yield
    finally:
        _LEASE.reset(token)
        _HANDLING.reset(handling)


def rate_limited(
    limiter: RateLimiter | SyncRateLimiter,
    *,
    resource: str,
    entity: Callable[[Event], str | None],
    consume: Mapping[str, int] | Callable[[Event], Mapping[str, int]],
    also: Mapping[str, Mapping[str, int]]
    | Callable[[Event], Mapping[str, Mapping[str, int]] | None]
    | None = None,
    units: Mapping[str, str] | None = None,
    pk_secret: bytes | None = None,
    cancel_on_hold_lost: bool = False,
) -> Callable[[Handler], Handler]:
    """Decorate `handler(event, context)`: a plain function with a `SyncRateLimiter`, or an
    `async def` with a `RateLimiter`. `entity(event)` names the entity (None: not limited);
    `consume`/`also` are dicts or callables of the event. `cancel_on_hold_lost` (an `async
    def` handler only: a thread cannot be interrupted): when a concurrency hold of the
    request's lease is lost, cancel the handler at once and answer 503; the lease is
    refunded."""

    def acquisition(event: Event) -> Any:
        """The acquire for this event, or None when the entity function says not limited."""
        entity_id = entity(event)
        if entity_id is None:
            return None
        amounts = resolve_request(consume, event)
        return limiter.acquire(entity_id, resource, amounts, also=resolve_request(also, event))

    def answered(event: Event, lease: Any, response: Any) -> Any:
        return with_headers(
            event, response, ratelimit_headers(lease, units=units, pk_secret=pk_secret)
        )

    def refusal(event: Event, exc: Refusal) -> dict[str, Any]:
        return _answer_or_raise(event, exc, units, pk_secret)

    def decorate(handler: Handler) -> Handler:
        if inspect.iscoroutinefunction(handler):
            if not isinstance(limiter, RateLimiter):
                raise TypeError("an async handler needs an async RateLimiter")

            @functools.wraps(handler)
            async def run_async(event: Event, context: Any, *args: Any, **kwargs: Any) -> Any:
                gate = acquisition(event)
                if gate is None:
                    with _holding(None):
                        return await handler(event, context, *args, **kwargs)
                try:
                    async with gate as lease:
                        with _holding(lease):
                            work = _cancellable(
                                handler(event, context, *args, **kwargs),
                                lease if cancel_on_hold_lost else None,
                            )
                            return answered(event, lease, await work)
                except _REFUSALS as exc:
                    return refusal(event, exc)

            return run_async  # type: ignore[return-value]

        _check_plain(limiter, cancel_on_hold_lost)

        @functools.wraps(handler)
        def run(event: Event, context: Any, *args: Any, **kwargs: Any) -> Any:
            gate = acquisition(event)
            if gate is None:
                with _holding(None):
                    return handler(event, context, *args, **kwargs)
            try:
                with gate as lease, _holding(lease):
                    return answered(event, lease, handler(event, context, *args, **kwargs))
            except _REFUSALS as exc:
                return refusal(event, exc)

        return run  # type: ignore[return-value]

    return decorate


def _cancellable(work: Awaitable[Any], lease: Lease | None) -> Awaitable[Any]:
    """The handler's work, cancelled when a hold of `lease` is lost (None: as it is)."""
    return work if lease is None else cancelled_on_hold_lost(lease, work)


def _check_plain(limiter: RateLimiter | SyncRateLimiter, cancel_on_hold_lost: bool) -> None:
    """A plain (sync) handler: a `SyncRateLimiter`, and nothing to cancel it with."""
    if cancel_on_hold_lost:
        raise TypeError(
            "cancel_on_hold_lost needs an async def handler (a plain one runs in a thread, "
            "which cannot be interrupted); in a plain handler check "
            "current_lease(SyncLease).hold_lost, or register lease.on_hold_lost(...)"
        )
    if not isinstance(limiter, SyncRateLimiter):
        raise TypeError("a plain (sync) handler needs a SyncRateLimiter")


# --- proxy-format responses --------------------------------------------------------------------


def _answer_or_raise(
    event: Event, exc: Refusal, units: Mapping[str, str] | None, pk_secret: bytes | None
) -> dict[str, Any]:
    if isinstance(exc, PermissionDenied):
        raise exc  # a misconfiguration, not an outage: not answered as one (docs/errors.md)
    return error_proxy_response(event, exc, units=units, pk_secret=pk_secret)


def _is_alb(event: Event) -> bool:
    return "elb" in (event.get("requestContext") or {})


def _multi_value(event: Event, response: Mapping[str, Any]) -> bool:
    """An ALB target group reads one form, the event's: `multiValueHeaders` when it has
    multi-value headers on, else `headers`. API Gateway reads both: keep the handler's form."""
    if _is_alb(event):
        return "multiValueHeaders" in event
    return "multiValueHeaders" in response and "headers" not in response


def error_proxy_response(
    event: Event,
    exc: Refusal,
    *,
    units: Mapping[str, str] | None = None,
    pk_secret: bytes | None = None,
) -> dict[str, Any]:
    """The proxy-format 429/403/503 for `event`'s integration (API Gateway REST or HTTP API,
    ALB)."""
    status, headers, body = error_response(exc, units=units, pk_secret=pk_secret)
    response: dict[str, Any] = {
        "statusCode": status,
        "body": body.decode(),
        "isBase64Encoded": False,
    }
    if _is_alb(event):
        response["statusDescription"] = f"{status} {_REASONS[status]}"
    answered: dict[str, Any] = with_headers(event, response, headers)
    return answered


def with_headers(event: Event, response: Any, headers: Mapping[str, str]) -> Any:
    """`response` with `headers` added, in the shape the integration reads."""
    if not headers:
        return response
    if not (isinstance(response, Mapping) and "statusCode" in response):
        if event.get("version") != "2.0":
            return response  # not a proxy response: nothing to attach headers to
        # HTTP API (payload 2.0) turns any other value into a 200 JSON answer; do it here.
        response = {
            "statusCode": 200,
            "headers": {"Content-Type": "application/json"},
            "body": response if isinstance(response, str) else json.dumps(response),
        }
    out = dict(response)
    alb = _is_alb(event)
    if _multi_value(event, out):
        multi = {k: list(v) for k, v in (out.get("multiValueHeaders") or {}).items()}
        if alb:  # the handler's single-value headers, in the form the target group reads
            for name, value in (out.pop("headers", None) or {}).items():
                multi.setdefault(name, [value])
        for name, value in headers.items():
            multi[name] = [value]
        out["multiValueHeaders"] = multi
    else:
        single = dict(out.get("headers") or {})
        if alb:
            for name, values in (out.pop("multiValueHeaders", None) or {}).items():
                if values:
                    single.setdefault(name, values[-1])
        out["headers"] = {**single, **headers}
    return out
