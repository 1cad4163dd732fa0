"""Wire recorder: counts DynamoDB requests, round trips and capacity units per block of code.

Attach it to botocore/aiobotocore clients (`recorder.attach(client)`, or `recorder.install()`
to attach to every client created afterwards), then::

    with recorder.block() as w:          # or: async with recorder.block() as w:
        await asyncio.gather(client.update_item(...), client.update_item(...))
    assert (w.round_trips, w.rcu, w.wcu) == (1, 0, 2)

While a block is open every DynamoDB request that accepts it is sent with
`ReturnConsumedCapacity="INDEXES"`, and each API call is recorded with its operation, monotonic
start/end, item count, the capacity DynamoDB reported (table and per index) and its error code.

Counting rules (AWS billing, docs/performance.md) — what `rcu` / `wcu` add up:

* successful single-item writes (PutItem, UpdateItem, DeleteItem) and BatchWriteItem: the
  capacity reported, table plus indexes;
* a write that failed its condition (ConditionalCheckFailedException): 1 WCU per item
  (DynamoDB Local reports none);
* TransactWriteItems: 2 WCU per item by the AWS rule (DynamoDB Local reports one item's worth per
  table), plus the index capacity reported; a cancelled transaction counts its items the same way;
* TransactGetItems: 2 RCU per item;
* other reads (GetItem, BatchGetItem, Query, Scan): the capacity reported (GetItem: 0.5 eventually
  consistent, 1 strongly consistent, per 4 KB);
* every other failure, and control-plane calls, count 0.

Round trips are the longest chain of calls in which each starts after the previous one ended,
so calls sent together (asyncio.gather) form one round trip; a call that was retried counts one
round trip per attempt.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import botocore.client

WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)
READ_OPERATIONS = frozenset({"GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"})
SINGLE_ITEM_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
TRANSACTION_UNITS_PER_ITEM = 2.0
FAILED_CONDITIONAL_WRITE_UNITS = 1.0

_CONTEXT_KEY = "zae_wire_request"
_HANDLER_ID = "zae-wire-recorder"


@dataclass
class WireRequest:
    """One DynamoDB API call as seen on the wire (retries included)."""

    operation: str
    start: float
    end: float | None = None
    items: int = 0
    attempts: int = 1
    error_code: str | None = None
    transport_error: str | None = None
    #: Capacity DynamoDB reported: the table's share and each index's, summed over tables.
    table_capacity: float = 0.0
    index_capacity: dict[str, float] = field(default_factory=dict)
    reported_total: float = 0.0
    consumed_capacity: list[dict[str, Any]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict, repr=False)
    cancellation_codes: list[str | None] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.error_code is not None or self.transport_error is not None

    @property
    def conditional_failure(self) -> bool:
        return self.error_code == "ConditionalCheckFailedException"

    @property
    def transaction_cancelled(self) -> bool:
        return self.error_code == "TransactionCanceledException"

    @property
    def index_units(self) -> float:
        return sum(self.index_capacity.values())

    @property
    def wcu(self) -> float:
        """Write capacity units by the AWS rule (see the module docstring)."""
        op = self.operation
        if op not in WRITE_OPERATIONS:
            return 0.0
        if op == "TransactWriteItems":
            if self.error_code is None:
                return TRANSACTION_UNITS_PER_ITEM * self.items + self.index_units
            if self.transaction_cancelled:
                return TRANSACTION_UNITS_PER_ITEM * self.items
            return 0.0
        if self.conditional_failure and op in SINGLE_ITEM_WRITES:
            return FAILED_CONDITIONAL_WRITE_UNITS * self.items
        if self.failed:
            return 0.0
        return self.reported_total

    @property
    def rcu(self) -> float:
        """Read capacity units by the AWS rule (see the module docstring)."""
        op = self.operation
        if op not in READ_OPERATIONS or self.failed:
            return 0.0
        if op == "TransactGetItems":
            return TRANSACTION_UNITS_PER_ITEM * self.items
        return self.reported_total

    @property
    def duration(self) -> float:
        return (self.end if self.end is not None else self.start) - self.start


def round_trips(requests: list[WireRequest]) -> int:
    """Longest chain of calls where each starts after the previous one ended.

    Each call weighs its number of attempts (a retried call is several round trips).
    """
    ordered = sorted(requests, key=lambda r: r.start)
    best: list[int] = []
    for i, request in enumerate(ordered):
        before = [
            best[j]
            for j in range(i)
            if ordered[j].end is not None and ordered[j].end <= request.start  # type: ignore[operator]
        ]
        best.append(max(before, default=0) + max(1, request.attempts))
    return max(best, default=0)


class WireBlock:
    """The calls recorded while one `recorder.block()` was open."""

    def __init__(self, recorder: WireRecorder) -> None:
        self._recorder = recorder
        self.requests: list[WireRequest] = []
        self.started = time.perf_counter()
        self.ended: float | None = None

    # --- context manager (sync and async) ------------------------------------------------
    def __enter__(self) -> WireBlock:
        self._recorder._open(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.ended = time.perf_counter()
        self._recorder._close(self)

    async def __aenter__(self) -> WireBlock:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)

    # --- totals --------------------------------------------------------------------------
    @property
    def round_trips(self) -> int:
        return round_trips(self.requests)

    @property
    def rcu(self) -> float:
        return sum(r.rcu for r in self.requests)

    @property
    def wcu(self) -> float:
        return sum(r.wcu for r in self.requests)

    @property
    def index_wcu(self) -> float:
        """The index part of `wcu` (writes that landed in an index)."""
        return sum(
            r.index_units for r in self.requests if r.operation in WRITE_OPERATIONS and not r.failed
        )

    @property
    def by_operation(self) -> dict[str, int]:
        """Number of calls per operation name, e.g. {"UpdateItem": 2}."""
        return dict(Counter(r.operation for r in self.requests))

    @property
    def failures(self) -> list[WireRequest]:
        return [r for r in self.requests if r.failed]

    def operations(self, name: str) -> list[WireRequest]:
        return [r for r in self.requests if r.operation == name]

    def summary(self) -> dict[str, Any]:
        """Everything at once, for assertion messages."""
        return {
            "requests": len(self.requests),
            "round_trips": self.round_trips,
            "rcu": self.rcu,
            "wcu": self.wcu,
            "by_operation": self.by_operation,
            "failures": [r.error_code or r.transport_error for r in self.failures],
        }

    def __repr__(self) -> str:
        return f"WireBlock({self.summary()})"


class WireRecorder:
    """Records DynamoDB calls of every client it is attached to, while a block is open."""

    def __init__(self, *, inject_capacity: bool = True) -> None:
        self.inject_capacity = inject_capacity
        self._blocks: list[WireBlock] = []
        self._lock = threading.Lock()
        self._original_init: Any = None

    # --- attaching -------------------------------------------------------------------------
    def attach(self, client: Any) -> Any:
        """Register the recorder's handlers on one botocore or aiobotocore client."""
        events = client.meta.events  # registering the same unique_id twice is a no-op
        events.register(
            "before-parameter-build.dynamodb",
            self._before_parameter_build,
            unique_id=f"{_HANDLER_ID}-bpb",
        )
        events.register("after-call.dynamodb", self._after_call, unique_id=f"{_HANDLER_ID}-ac")
        events.register(
            "after-call-error.dynamodb", self._after_call_error, unique_id=f"{_HANDLER_ID}-ace"
        )
        return client

    def install(self) -> None:
        """Attach to every botocore/aiobotocore client created from now on (until uninstall)."""
        if self._original_init is not None:
            return
        original = botocore.client.BaseClient.__init__
        recorder = self

        def patched_init(client: Any, *args: Any, **kwargs: Any) -> None:
            original(client, *args, **kwargs)
            if client.meta.service_model.service_name == "dynamodb":
                recorder.attach(client)

        self._original_init = original
        botocore.client.BaseClient.__init__ = patched_init

    def uninstall(self) -> None:
        if self._original_init is not None:
            botocore.client.BaseClient.__init__ = self._original_init
            self._original_init = None

    # --- blocks ----------------------------------------------------------------------------
    def block(self) -> WireBlock:
        """A context manager (sync or async) that collects the calls started inside it."""
        return WireBlock(self)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Calls made inside are not recorded by any open block (setup inside a block)."""
        with self._lock:
            saved, self._blocks = self._blocks, []
        try:
            yield
        finally:
            with self._lock:
                self._blocks = saved + self._blocks

    def _open(self, block: WireBlock) -> None:
        with self._lock:
            self._blocks.append(block)

    def _close(self, block: WireBlock) -> None:
        with self._lock:
            if block in self._blocks:
                self._blocks.remove(block)

    # --- event handlers --------------------------------------------------------------------
    def _before_parameter_build(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        with self._lock:
            blocks = list(self._blocks)
        if not blocks:
            return
        if self.inject_capacity and "ReturnConsumedCapacity" in model.input_shape.members:
            params["ReturnConsumedCapacity"] = "INDEXES"
        request = WireRequest(
            operation=model.name,
            start=time.perf_counter(),
            items=_request_items(model.name, params),
            params=dict(params),
        )
        context[_CONTEXT_KEY] = request
        with self._lock:
            for block in blocks:
                block.requests.append(request)

    def _after_call(
        self,
        http_response: Any,
        parsed: dict[str, Any],
        model: Any,
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        request: WireRequest | None = context.get(_CONTEXT_KEY)
        if request is None:
            return
        request.end = time.perf_counter()
        metadata = parsed.get("ResponseMetadata", {})
        request.attempts = 1 + int(metadata.get("RetryAttempts", 0) or 0)
        if getattr(http_response, "status_code", 200) >= 300:
            request.error_code = parsed.get("Error", {}).get("Code") or "UnknownError"
            request.cancellation_codes = [
                reason.get("Code") for reason in parsed.get("CancellationReasons", []) or []
            ]
        if model.name in ("Query", "Scan"):
            request.items = int(parsed.get("Count", 0) or 0)
        _apply_capacity(request, parsed.get("ConsumedCapacity"))

    def _after_call_error(
        self, exception: BaseException, context: dict[str, Any], **_: Any
    ) -> None:
        request: WireRequest | None = context.get(_CONTEXT_KEY)
        if request is None:
            return
        request.end = time.perf_counter()
        request.transport_error = type(exception).__name__


def _request_items(operation: str, params: dict[str, Any]) -> int:
    if operation in ("PutItem", "UpdateItem", "DeleteItem", "GetItem"):
        return 1
    if operation in ("TransactWriteItems", "TransactGetItems"):
        return len(params.get("TransactItems", []))
    if operation == "BatchWriteItem":
        return sum(len(v) for v in params.get("RequestItems", {}).values())
    if operation == "BatchGetItem":
        return sum(len(v.get("Keys", [])) for v in params.get("RequestItems", {}).values())
    return 0


def _apply_capacity(request: WireRequest, consumed: Any) -> None:
    if not consumed:
        return
    entries: list[dict[str, Any]] = consumed if isinstance(consumed, list) else [consumed]
    request.consumed_capacity = entries
    for entry in entries:
        total = float(entry.get("CapacityUnits", 0.0) or 0.0)
        indexes = 0.0
        for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
            for name, units in (entry.get(kind) or {}).items():
                value = float(units.get("CapacityUnits", 0.0) or 0.0)
                request.index_capacity[name] = request.index_capacity.get(name, 0.0) + value
                indexes += value
        table = entry.get("Table")
        request.table_capacity += (
            float(table.get("CapacityUnits", 0.0) or 0.0) if table else total - indexes
        )
        request.reported_total += total
