"""The simulated network between one process and the simulated table, with DynamoDB's faults.

A `Link` stands where the library's HTTP path stands (`Transport.http`: `send(operation,
request)` returns the parsed answer or raises what botocore raises), so everything above it is
the library's own code: the transport's retries and retry budget, `dynamo.failures`' mapping,
the stores, the acquire path. A request leaves when it is sent and reaches the table a drawn
latency later, whatever happens to its sender meanwhile (a cancelled caller or a killed process
cannot take back a request on the wire); its answer comes back a drawn latency after that,
unless a fault intervenes. Faults, drawn per request from the run's generator:

- ``lost``: applied, the answer never comes (the client's read timeout fires);
- ``latency``: applied, the answer comes after the read timeout (the same for the client);
- ``late``: reaches the table only after the read timeout, possibly after its re-send;
- ``throttle``: ``ThrottlingException``, not applied;
- ``5xx``: ``InternalServerError``, applied or not (a coin);
- ``conflict``: ``ReplicatedWriteConflictException``, not applied;
and windows per process: a *partition* (every request hangs to the read timeout, half of them
applied first, or the connection is refused) and a *brown-out* (every write throttled, which
spends the client's retry budget). A killed process's link drops everything from then on.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

from botocore import exceptions as bce

from support.sim.table import Refused, SimTable

KINDS = ("lost", "latency", "late", "throttle", "5xx", "conflict")
WRITES = frozenset({"UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems",
                    "BatchWriteItem"})  # fmt: skip
ENDPOINT = "http://simulated-dynamodb"


@dataclass(frozen=True)
class Faults:
    """How one process's requests fail."""

    rate: float = 0.1  # of writes faulted, shared evenly by `kinds`
    kinds: tuple[str, ...] = KINDS
    latency_s: tuple[float, float] = (0.001, 0.02)  # one way
    read_timeout_s: float = 0.5
    late_s: tuple[float, float] = (0.6, 1.5)  # a late request's arrival after sending


@dataclass
class Window:
    """A span of loop time in which every request of the process meets `kind`."""

    kind: str  # "partition" or "brownout"
    start: float
    end: float


def client_error(operation: str, status: int, code: str, message: str, **extra: Any) -> Exception:
    """botocore's ClientError for an error answer (as `dynamo.http._parse` shapes it)."""
    parsed: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": 0},
        **extra,
    }
    error: Exception = bce.ClientError(parsed, operation)
    return error


class Link:
    """One process's HTTP path to the simulated table (see the module docstring)."""

    def __init__(
        self,
        table: SimTable,
        rng: random.Random,
        faults: Faults,
        windows: list[Window] | None = None,
        *,
        on_request: Any = None,
    ) -> None:
        self.table = table
        self.rng = rng
        self.faults = faults
        self.windows = windows or []
        self.dead = False
        self.limbo: list[asyncio.Future[Any]] = []  # what a dead process waits for, forever
        self.requests = 0  # requests sent (that reached the network)
        self.counts: Counter[str] = Counter()  # faults by kind
        self.by_operation: Counter[str] = Counter()
        #: when each item (by PK) refused one of this process's writes on its condition
        self.failed: dict[str, list[float]] = {}
        self.on_request = on_request  # (operation, request, answer or Refused) for recordings

    async def close(self) -> None:
        pass

    def kill(self) -> None:
        """The process is gone: nothing it sends from now on leaves, no answer reaches it."""
        self.dead = True

    def _window(self, now: float) -> str | None:
        for window in self.windows:
            if window.start <= now < window.end:
                return window.kind
        return None

    def _fault(self, operation: str, now: float) -> str | None:
        window = self._window(now)
        if window == "partition":
            return "partition"
        if window == "brownout" and operation in WRITES:
            return "brownout"
        if operation not in WRITES or not self.faults.kinds:
            return None
        if self.rng.random() >= self.faults.rate:
            return None
        return self.faults.kinds[int(self.rng.random() * len(self.faults.kinds))]

    async def _never(self) -> Any:
        """Wait forever (the process is dead; its task is kept, not collected mid-run)."""
        future = asyncio.get_running_loop().create_future()
        self.limbo.append(future)
        return await future

    async def send(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        if self.dead:
            await self._never()
        self.requests += 1
        self.by_operation[operation] += 1
        faults = self.faults
        fault = self._fault(operation, loop.time())
        there = self.rng.uniform(*faults.latency_s)
        back = self.rng.uniform(*faults.latency_s)
        coin = self.rng.random()
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        timeout = faults.read_timeout_s
        if fault is not None:
            self.counts[fault] += 1
        if fault == "partition" and coin < 0.3:
            raise bce.EndpointConnectionError(endpoint_url=ENDPOINT, error="refused")  # not sent

        def apply() -> None:
            try:
                result: dict[str, Any] | Exception = self._apply(operation, request)
            except Refused as refused:
                result = client_error(
                    operation, refused.status, refused.code, refused.message, **refused.extra
                )
            if fault in ("lost", "latency", "late", "partition") or self.dead:
                return  # the answer never reaches the client in time
            if fault == "5xx":
                result = client_error(operation, 500, "InternalServerError", "injected")
            loop.call_later(back, _settle, answer, result)

        if fault in ("throttle", "brownout"):
            error = client_error(operation, 400, "ThrottlingException", "injected")
            loop.call_later(there + back, _settle, answer, error)
        elif fault == "conflict":
            error = client_error(operation, 400, "ReplicatedWriteConflictException", "injected")
            loop.call_later(there + back, _settle, answer, error)
        elif fault == "5xx" and coin < 0.5:  # refused before applying
            error = client_error(operation, 500, "InternalServerError", "injected")
            loop.call_later(there + back, _settle, answer, error)
        elif fault == "late":
            loop.call_later(self.rng.uniform(*faults.late_s), apply)
        elif fault == "partition" and coin < 0.65:
            pass  # hangs, never applied
        else:
            loop.call_later(there, apply)
        if fault is None and there + back < timeout:  # answered in time: no timer needed
            result = await answer
        else:
            timer = loop.call_later(timeout, _settle, answer, _timed_out())
            try:
                result = await answer
            finally:
                timer.cancel()
        if self.dead:
            await self._never()
        return result

    def _apply(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        try:
            result = self.table.answer(operation, request)
        except Refused as refused:
            if refused.code == "ConditionalCheckFailedException" and "Key" in request:
                pk = request["Key"]["PK"]["S"]
                self.failed.setdefault(pk, []).append(asyncio.get_running_loop().time())
            if self.on_request is not None:
                self.on_request(operation, request, refused)
            raise
        if self.on_request is not None:
            self.on_request(operation, request, result)
        return result


def _timed_out() -> Exception:
    error: Exception = bce.ReadTimeoutError(endpoint_url=ENDPOINT, error="read timeout (simulated)")
    return error


def _settle(answer: asyncio.Future[Any], result: Any) -> None:
    if answer.done():
        return
    if isinstance(result, BaseException):
        answer.set_exception(result)
    else:
        answer.set_result(result)
