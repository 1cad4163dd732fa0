"""The request hook: one `RequestEvent` per DynamoDB request the library sends.

See docs/request-hook.md.

Listeners are registered on a repository (`Repository.open(on_request=...)` or
`repo.add_request_listener(fn)`) and called on every request path (the lean path and
`ZAEL_TRANSPORT=botocore`), once per attempt, after the answer (or the failure). While at least
one listener is registered the library asks DynamoDB for `ReturnConsumedCapacity="INDEXES"`;
with none it asks for nothing, so an unobserved client pays nothing.

A listener runs on the event loop, inline: keep it cheap. One that raises is logged (logger
`zae_limiter`) and ignored; it never fails the request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("zae_limiter")

#: Operations DynamoDB reports consumed capacity for (they accept `ReturnConsumedCapacity`).
CAPACITY_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchGetItem",
        "BatchWriteItem",
        "Query",
        "Scan",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)

#: `RequestEvent.outcome` values.
OK = "ok"
CONDITION_FAILED = "condition_failed"
THROTTLED = "throttled"
NOT_SENT = "not_sent"
UNKNOWN = "unknown"
ERROR = "error"
#: ReplicatedWriteConflictException (a multi-Region strongly consistent table): another Region
#: was writing the item; nothing was applied (docs/multi-region.md).
CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """One DynamoDB request, as the library sent it and what came of it."""

    operation: str  # "UpdateItem", "GetItem", "TransactWriteItems", ...
    table: str
    duration_ms: float  # send to answer (or to failure)
    outcome: str  # "ok" | "condition_failed" | "throttled" | "conflict" | "not_sent" | ...
    read_units: float | None  # consumed capacity (table + indexes); None when not reported
    write_units: float | None
    attempt: int  # 1 for the first send, 2.. for retries
    # The repository's deadline counters when the request ended (as in `get_cache_stats()`).
    pending_resolutions: int = 0
    resolved_after_deadline: int = 0
    refunded_after_deadline: int = 0
    abandoned_at_close: int = 0
    # The repository's overload counters (as in `get_cache_stats()`).
    shed_overloaded: int = 0
    writes_per_decided_call: float = 0.0


#: (pending, resolved after a deadline, refunded after a deadline, abandoned at close, shed for
#: overload, writes per decided call).
DeadlineCounts = tuple[int, int, int, int, int, float]
RequestListener = Callable[[RequestEvent], None]


class RequestListeners:
    """The listeners of one client. Truthy while any is registered."""

    def __init__(self) -> None:
        self._listeners: list[RequestListener] = []
        #: The deadline counters each event carries (set by the repository that owns them).
        self.counters: Callable[[], DeadlineCounts] = lambda: (0, 0, 0, 0, 0, 0.0)

    def add(self, listener: RequestListener) -> Callable[[], None]:
        """Register `listener`; returns a function that removes it (idempotent)."""
        if not callable(listener):
            from .errors import ValidationError

            raise ValidationError("on_request", listener, "pass a callable taking a RequestEvent")
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def emit(self, event: RequestEvent) -> None:
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:
                log.warning("request listener %r raised; ignored", listener, exc_info=True)


def with_capacity(operation: str, request: dict[str, Any]) -> dict[str, Any]:
    """`request` asking DynamoDB to report consumed capacity, where the operation can."""
    if operation not in CAPACITY_OPERATIONS or "ReturnConsumedCapacity" in request:
        return request
    return {**request, "ReturnConsumedCapacity": "INDEXES"}


def capacity(operation: str, answer: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """(read units, write units) an answer reports, table and indexes; None: not reported."""
    consumed = answer.get("ConsumedCapacity") if answer else None
    if not consumed:
        return None, None
    entries = consumed if isinstance(consumed, list) else [consumed]
    units = sum(float(entry.get("CapacityUnits", 0.0) or 0.0) for entry in entries)
    if operation in WRITE_OPERATIONS:
        return None, units
    return units, None


def table_of(request: Mapping[str, Any]) -> str:
    """The table a request addresses (the first one, for batches and transactions)."""
    name = request.get("TableName")
    if name:
        return str(name)
    items = request.get("RequestItems")
    if items:
        return str(next(iter(items)))
    for operation in request.get("TransactItems") or ():
        for body in operation.values():
            if isinstance(body, Mapping) and body.get("TableName"):
                return str(body["TableName"])
    return ""
