"""The one place requests reach DynamoDB: an aiobotocore client, retries, and typed errors.

The SDK's own retries are off (`total_max_attempts=1`): botocore re-sends a write after a read
timeout even when the first attempt landed, which would double a debit. Here a retry happens only
when the request certainly did not apply (throttling, connection refused); when the outcome is
unknown (timeout after sending, 5xx) a write raises `UnknownOutcome` and its caller retries with a
guard that refuses a second application.

Requests go out through `dynamo.http` (DynamoDB's JSON protocol, signed here, over the library's
own keep-alive connections), which costs a fraction of the CPU of botocore's pipeline; the
aiobotocore client still provides the credential chain, the resolved endpoint and TLS settings,
the operation models and the event hooks. `ZAEL_TRANSPORT=aiohttp` carries the lean path's bytes
with one `aiohttp.ClientSession` instead; `ZAEL_TRANSPORT=botocore` sends every request through
aiobotocore (so do proxied endpoints).

aiobotocore is imported only when a client is created, so that code without it (the aggregator
Lambda, which wraps a boto3 client: `dynamo.threaded`) can import the package.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..instrumentation import (
    THROTTLED,
    RequestEvent,
    RequestListeners,
    capacity,
    table_of,
    with_capacity,
)
from .failures import (
    AccessDenied,
    ConditionFailed,
    DynamoError,
    DynamoUnavailable,
    Rejected,
    TableMissing,
    TransactionCancelled,
    UnknownOutcome,
    classify,
    is_condition_failed,
)
from .retries import RetryBudget

if TYPE_CHECKING:
    from aiobotocore.config import AioConfig

    from .http import HttpPath

MAX_ATTEMPTS = 4
BASE_DELAY_S = 0.025
# Tests set this to 0 to skip backoff sleeps.
backoff_scale = 1.0

__all__ = [
    "AccessDenied",
    "ConditionFailed",
    "DynamoError",
    "DynamoUnavailable",
    "Rejected",
    "TableMissing",
    "TransactionCancelled",
    "Transport",
    "UnknownOutcome",
    "is_condition_failed",
]


#: Client settings for every DynamoDB client the library makes (aiobotocore or boto3): no SDK
#: retries (see the module docstring), short timeouts, a pool for concurrent callers.
CLIENT_SETTINGS: dict[str, Any] = {
    "retries": {"mode": "standard", "total_max_attempts": 1},
    "connect_timeout": 2,
    "read_timeout": 5,
    "max_pool_connections": 64,
    "tcp_keepalive": True,
}


def request_timeouts(client_config: Any) -> tuple[float, float]:
    """(connect_timeout, read_timeout) in seconds, as the client will use them: the library's
    settings merged with what `client_config` sets explicitly (`Transport.connect`)."""
    if client_config is None:
        return float(CLIENT_SETTINGS["connect_timeout"]), float(CLIENT_SETTINGS["read_timeout"])
    from botocore.config import Config

    merged = Config(**CLIENT_SETTINGS).merge(client_config)
    return float(merged.connect_timeout), float(merged.read_timeout)


def default_client_config() -> AioConfig:
    from aiobotocore.config import AioConfig

    return AioConfig(**CLIENT_SETTINGS)


class Transport:
    """One aiobotocore DynamoDB client bound to one event loop."""

    def __init__(self, client: Any, exit_stack: Any, http: HttpPath | None = None) -> None:
        self.client = client
        self._exit = exit_stack
        self.http = http  # the lean path (dynamo.http); None: every request goes through botocore
        self.closed = False
        self.listeners = RequestListeners()
        self.budget = RetryBudget()
        self.on_throttle: Callable[[], None] | None = None  # told of every throttled attempt

    @classmethod
    async def connect(
        cls,
        *,
        region: str | None,
        endpoint_url: str | None,
        client_config: Any = None,
    ) -> Transport:
        session = _session()
        merged = default_client_config()
        if client_config is not None:
            merged = merged.merge(client_config)
            merged.retries = {"mode": "standard", "total_max_attempts": 1}
        creator = session.create_client(
            "dynamodb",
            region_name=region or _default_region(session),
            endpoint_url=endpoint_url,
            config=merged,
        )
        client = await creator.__aenter__()
        http = None
        choice = os.environ.get("ZAEL_TRANSPORT", "http")
        if choice != "botocore":
            from .http import lean_path

            credentials = await session.get_credentials()
            http = lean_path(
                client,
                credentials,
                merged,
                session.get_config_variable("ca_bundle"),
                carrier="aiohttp" if choice == "aiohttp" else "own",
            )
        return cls(client, creator, http)

    @property
    def region(self) -> str:
        return str(self.client.meta.region_name)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.http is not None:
                await self.http.close()
            await self._exit.__aexit__(None, None, None)

    async def call(
        self, operation: str, request: dict[str, Any], *, write: bool = False
    ) -> dict[str, Any]:
        """Send one request. Retries only what certainly did not apply (and reads), within
        the client's retry budget; every failure comes out as a `DynamoError` (`failures`).
        Each throttled attempt is told to `on_throttle` (the acquire path paces its writes)."""
        listening = bool(self.listeners)
        if listening:
            request = with_capacity(operation, request)
        spent = 0
        for attempt in range(1, MAX_ATTEMPTS + 1):
            started = time.perf_counter()
            try:
                response = await self._send(operation, request)
            except Exception as exc:
                failure = classify(exc, operation, write=write)
                if listening:
                    answer = getattr(exc, "response", None)
                    self._tell(operation, request, started, failure.outcome, answer, attempt)
                if failure.outcome == THROTTLED and self.on_throttle is not None:
                    self.on_throttle()
                last_try = attempt == MAX_ATTEMPTS
                if failure.retry_cost and not last_try and self.budget.take(failure.retry_cost):
                    spent += failure.retry_cost
                    if not failure.at_once:
                        await asyncio.sleep(
                            backoff_scale * BASE_DELAY_S * (2**attempt) * random.random()
                        )
                    continue
                if failure.retry_cost and not last_try:
                    raise DynamoUnavailable(exc, "the client's retry budget is spent") from exc
                error = failure.error
                cause = None if isinstance(error, (ConditionFailed, TransactionCancelled)) else exc
                raise error from cause
            self.budget.succeeded(spent)
            if listening:
                self._tell(operation, request, started, "ok", response, attempt)
            return response
        raise AssertionError("unreachable")

    async def _send(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.closed:
            raise DynamoUnavailable(RuntimeError("the client is closed"))
        if self.http is not None:
            return await self.http.send(operation, request)
        method: Callable[..., Awaitable[dict[str, Any]]] = getattr(self.client, _snake(operation))
        return await method(**request)

    def _tell(
        self,
        operation: str,
        request: dict[str, Any],
        started: float,
        outcome: str,
        answer: Any,
        attempt: int,
    ) -> None:
        """One `RequestEvent` to the listeners."""
        reads, writes = capacity(operation, answer if isinstance(answer, dict) else None)
        pending, resolved, refunded, abandoned, shed, per_decided = self.listeners.counters()
        self.listeners.emit(
            RequestEvent(
                operation=operation,
                table=table_of(request),
                duration_ms=(time.perf_counter() - started) * 1000.0,
                outcome=outcome,
                read_units=reads,
                write_units=writes,
                attempt=attempt,
                pending_resolutions=pending,
                resolved_after_deadline=resolved,
                refunded_after_deadline=refunded,
                abandoned_at_close=abandoned,
                shed_overloaded=shed,
                writes_per_decided_call=per_decided,
            )
        )


_shared_session: Any = None


def _session() -> Any:
    """One botocore session per process: creating one costs ~0.3 s, a client from it ~15 ms."""
    global _shared_session
    if _shared_session is None:
        from aiobotocore.session import get_session

        _shared_session = get_session()
    return _shared_session


def _default_region(session: Any) -> str:
    region = session.get_config_variable("region")
    return str(region) if region else "us-east-1"


def _snake(operation: str) -> str:
    out: list[str] = []
    for ch in operation:
        if ch.isupper() and out:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
