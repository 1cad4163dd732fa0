"""HTTP answers for a lease or a rejection: standard RateLimit headers and problem details.

Headers follow the IETF HTTP API WG draft "RateLimit header fields for HTTP"
(draft-ietf-httpapi-ratelimit-headers-11, 23 May 2026): `RateLimit-Policy` and `RateLimit` are
Structured Field lists with one item per limit of the caller's on every resource of the call
(the primary, then each `also=` resource), the same on an admission and a rejection, named
`<resource>.<limit>`. `t` is the draft's effective window: the seconds within which the client
can use no more than `r`.
Problem bodies follow RFC 9457 (`application/problem+json`), with the draft's
`quota-exceeded` type for a 429 and `temporary-reduced-capacity` for a 503 (the limiter could
not reach DynamoDB). See docs/integrations.md.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from ..connection import system_clock
from ..errors import (
    RateLimiterUnavailable,
    RateLimitExceeded,
    ResourceDisabled,
    ValidationError,
    policy_name,
)
from ..lease_view import LimitView, is_lease, lease_limits

PROBLEM_JSON = "application/problem+json"
REDUCED_CAPACITY_TYPE = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
REDUCED_CAPACITY_TITLE = "Service capacity is temporarily reduced"
#: `Retry-After` of a 503 for an unavailable limiter: DynamoDB's blips are usually that short.
UNAVAILABLE_RETRY_SECONDS = 1
#: Quota units of the draft's registry; "requests" is its default and is not written.
REGISTERED_UNITS = frozenset({"requests", "content-bytes", "concurrent-requests"})
#: The unit of a concurrency limit (`Limit.concurrent`) unless `units` names another.
CONCURRENT_UNIT = "concurrent-requests"
#: Prefixed parameter for a unit outside the registry (the draft: vendor-prefixed parameters).
UNIT_PARAMETER = "zael-unit"
_SF_INTEGER_MAX = 999_999_999_999_999  # RFC 9651: at most 15 digits
_PK_BYTES = 16


def partition_key(entity_id: str, secret: bytes) -> bytes:
    """The `pk` of an entity: a keyed hash (HMAC-SHA256, 16 bytes), never the raw id."""
    return hmac.new(secret, entity_id.encode(), hashlib.sha256).digest()[:_PK_BYTES]


def ratelimit_headers(
    source: Any,
    *,
    now_ms: int | None = None,
    units: Mapping[str, str] | None = None,
    pk_secret: bytes | None = None,
) -> dict[str, str]:
    """`RateLimit-Policy` and `RateLimit` for a `Lease`/`SyncLease` (after admission) or a
    `RateLimitExceeded`, which also gets `Retry-After` (whole seconds).

    `now_ms`: the time `t` is counted from (a lease uses its limiter's clock; a rejection
    defaults to the system clock). `units`: limit name -> quota unit; a registered unit is
    written as `qu`, any other as `zael-unit`. By default the unit follows the limit's kind,
    never its name: a concurrency limit is in `concurrent-requests` (no `w`, no `t`: a hold
    comes back when its lease ends), every other limit in the draft's default, requests (no
    `qu`). `pk_secret`: when given, every item carries `pk`, a keyed hash of the entity id.
    Empty for a no-op lease and for a call on unmetered resources only.
    """
    cap: int | None = None
    headers: dict[str, str] = {}
    if isinstance(source, RateLimitExceeded):
        entity_id, views = _own_limits(source)
        now = system_clock() if now_ms is None else now_ms
        headers["Retry-After"] = source.retry_after_header
        cap = int(source.retry_after_header)
    elif is_lease(source):
        entity_id, views, lease_now = lease_limits(source)
        now = lease_now if now_ms is None else now_ms
    else:
        raise TypeError(
            f"ratelimit_headers takes a Lease, SyncLease or RateLimitExceeded, "
            f"not {type(source).__name__}"
        )
    if views:
        pk = "" if pk_secret is None else _pk_parameter(partition_key(entity_id, pk_secret))
        policies, limits = [], []
        for view in views:
            unit = _unit_parameter(view.name, units, view.concurrent)
            policies.append(
                _policy_item(view.resource, view.name, view.capacity, view.span_seconds, unit, pk)
            )
            remaining = _effective_seconds(view, now)
            if remaining is not None and cap is not None:
                remaining = min(remaining, cap)  # never past Retry-After (draft §6)
            limits.append(
                _name_item(view.resource, view.name)
                + f";r={_sf_int(max(0, view.available))}"
                + ("" if remaining is None else f";t={_sf_int(remaining)}")
                + pk
            )
        headers["RateLimit-Policy"] = ", ".join(policies)
        headers["RateLimit"] = ", ".join(limits)
    return headers


#: What `problem_details`, `status_code` and `error_response` answer.
Refusal = RateLimitExceeded | ResourceDisabled | RateLimiterUnavailable


def problem_details(exc: Refusal) -> dict[str, Any]:
    """An RFC 9457 body: the refusal's own `as_problem()` (429 `quota-exceeded`, 403), or 503
    `temporary-reduced-capacity` when the limiter is unavailable (the cause is not sent: it
    names the table). Send it as `PROBLEM_JSON`."""
    if isinstance(exc, RateLimiterUnavailable):
        return {
            "type": REDUCED_CAPACITY_TYPE,
            "title": REDUCED_CAPACITY_TITLE,
            "status": 503,
            "detail": "The rate limiter cannot decide right now; retry shortly",
            "retry_after_seconds": UNAVAILABLE_RETRY_SECONDS,
        }
    if isinstance(exc, RateLimitExceeded | ResourceDisabled):
        return exc.as_problem()
    raise TypeError(
        "problem_details takes RateLimitExceeded, ResourceDisabled or RateLimiterUnavailable, "
        f"not {exc!r}"
    )


def status_code(exc: Refusal) -> int:
    """429 for a rejection, 403 for a disabled resource, 503 for an unavailable limiter."""
    if isinstance(exc, RateLimiterUnavailable):
        return 503
    return 429 if isinstance(exc, RateLimitExceeded) else 403


# --- items -------------------------------------------------------------------------------------


def _own_limits(exc: RateLimitExceeded) -> tuple[str, list[LimitView]]:
    """The caller and its own limits on every resource the decision evaluated, in the call's
    order: the policies an admission of the same call describes. A cascade parent's limits are
    never described (its figures are not the caller's)."""
    if not exc.statuses:
        return "", []
    caller = exc.statuses[0].entity_id
    return caller, [LimitView.of_status(s) for s in exc.statuses if s.entity_id == caller]


@functools.lru_cache(maxsize=1024)
def _name_item(resource: str, limit_name: str) -> str:
    return _sf_string(policy_name(resource, limit_name))


@functools.lru_cache(maxsize=1024)
def _policy_item(
    resource: str, limit_name: str, capacity: int, span: int | None, unit: str, pk: str
) -> str:
    """One `RateLimit-Policy` item (the same for every response under the same config).

    `w`: a rate limit's time to refill from empty, a session's length; none for a calendar
    quota (its period varies with months and DST; `t` says when it resets)."""
    return (
        _name_item(resource, limit_name)
        + f";q={_sf_int(capacity)}"
        + unit
        + ("" if span is None else f";w={_sf_int(span)}")
        + pk
    )


def _effective_seconds(view: LimitView, now_ms: int) -> int | None:
    """`t`, the draft's effective window: whole seconds within which the client can use no
    more than `r`. A dripping limit: until one more unit has dripped in; a quota: until it
    resets (a session not yet opened: its length, from the first use); a concurrency limit:
    none (its holds come back whenever leases end). Rounded up, like `Retry-After`: a client
    that keeps to `r` for `t` waits a little longer, never less."""
    if view.concurrent:
        return None
    if not view.is_quota:  # next_unit_ms is the first whole ms after the unit drips in
        return None if view.next_unit_ms is None else -(-(view.next_unit_ms - 1) // 1000)
    if view.resets_at_ms is None:
        return view.span_seconds
    return max(0, -(-(view.resets_at_ms - now_ms) // 1000))


def _unit_parameter(
    limit_name: str, units: Mapping[str, str] | None, concurrent: bool = False
) -> str:
    unit = (units or {}).get(limit_name)
    if unit is None:  # by the limit's kind, never guessed from its name
        unit = CONCURRENT_UNIT if concurrent else "requests"
    if unit == "requests":
        return ""
    if not unit or not _printable_ascii(unit):
        raise ValidationError("units", unit, "a quota unit is a non-empty printable ASCII name")
    if unit in REGISTERED_UNITS:
        return f";qu={_sf_string(unit)}"
    return f";{UNIT_PARAMETER}={_sf_string(unit)}"


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def _pk_parameter(pk: bytes) -> str:
    return f";pk=:{base64.b64encode(pk).decode()}:"


def _sf_int(value: int) -> str:
    return str(min(int(value), _SF_INTEGER_MAX))


def _sf_string(text: str) -> str:
    """An RFC 9651 String: printable ASCII, with `\\` and `"` escaped."""
    if not _printable_ascii(text):
        raise ValueError(f"{text!r} cannot be a Structured Field String (printable ASCII only)")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- shared by the ASGI middleware and the Lambda decorator ------------------------------------


def error_response(
    exc: Refusal,
    *,
    now_ms: int | None = None,
    units: Mapping[str, str] | None = None,
    pk_secret: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) answering a rejection (429), a disabled resource (403) or an
    unavailable limiter (503, with `Retry-After`)."""
    headers: dict[str, str] = {}
    if isinstance(exc, RateLimitExceeded):
        headers = ratelimit_headers(exc, now_ms=now_ms, units=units, pk_secret=pk_secret)
    elif isinstance(exc, RateLimiterUnavailable):
        headers["Retry-After"] = str(UNAVAILABLE_RETRY_SECONDS)
    body = json.dumps(problem_details(exc), separators=(",", ":")).encode()
    headers["Content-Type"] = PROBLEM_JSON
    return status_code(exc), headers, body


def resolve_request(value: Any, request: Any) -> Any:
    """`value(request)` when callable (consume/also chosen per request), else a copy of it."""
    if callable(value):
        return value(request)
    if isinstance(value, Mapping):
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}
    return value
