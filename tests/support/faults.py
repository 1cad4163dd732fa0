"""Fault injection for aiobotocore clients: planned errors and answers per operation.

`inject(client, "UpdateItem", [ddb_error("ProvisionedThroughputExceededException"), None])`
answers the next UpdateItem calls from the plan: an `AioAWSResponse` is returned instead of
sending, an exception instance is raised as if the transport failed, `None` lets the real request
through. The retry machinery treats injected faults exactly like real ones. `no_backoff` (a
fixture in fixtures.py) removes the standard retry mode's sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeAlias

from aiobotocore.awsrequest import AioAWSResponse

Fault: TypeAlias = "AioAWSResponse | BaseException | None"


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self._body = body

    async def read(self) -> bytes:
        return self._body


def ddb_error(code: str, message: str = "injected", status: int = 400, **extra: Any) -> Any:
    """A DynamoDB error response, e.g. ddb_error("TransactionCanceledException",
    CancellationReasons=[{"Code": "ConditionalCheckFailed"}])."""
    body = json.dumps(
        {"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": message, **extra}
    ).encode()
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    return AioAWSResponse("http://fault.invalid", status, headers, _RawBody(body))


def ddb_ok(body: dict[str, Any]) -> Any:
    """A successful DynamoDB response with a JSON body."""
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    return AioAWSResponse("http://fault.invalid", 200, headers, _RawBody(json.dumps(body).encode()))


class FaultPlan:
    """Answers the next calls of one operation from a list; then lets requests through."""

    def __init__(self, client: Any, operation: str, plan: list[Fault]) -> None:
        self.client = client
        self.operation = operation
        self.plan = list(plan)
        self.sent = 0  # requests that reached the hook (injected or real)
        self._event = f"before-send.dynamodb.{operation}"
        self._unique_id = f"zae-fault-{operation}-{id(self)}"
        client.meta.events.register(self._event, self._hook, unique_id=self._unique_id)

    def _hook(self, request: Any, **_: Any) -> Any:
        self.sent += 1
        if not self.plan:
            return None
        fault = self.plan.pop(0)
        if isinstance(fault, BaseException):
            raise fault
        return fault

    def remove(self) -> None:
        self.client.meta.events.unregister(self._event, unique_id=self._unique_id)

    def __enter__(self) -> FaultPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def inject(client: Any, operation: str, plan: list[Fault]) -> FaultPlan:
    """Start answering `operation` calls on `client` from `plan` (use as a context manager)."""
    return FaultPlan(client, operation, plan)


def zero_backoff() -> Callable[[Any, Any], float]:
    """A replacement for ExponentialBackoff.delay_amount that never sleeps."""

    def delay_amount(self: Any, context: Any) -> float:
        return 0.0

    return delay_amount
