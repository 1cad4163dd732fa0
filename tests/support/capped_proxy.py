"""A table that writes at most N items a second: a loopback proxy in front of DynamoDB Local.

`async with capped_proxy(endpoint, per_second=30) as proxy:` then point a `Repository` at
`proxy.url`. Reads pass. Writes take one token per item they write (a transaction or a batch:
one per item) from a bucket holding one second's worth and refilling at `per_second`; a write
that finds too few is answered 400 `ProvisionedThroughputExceededException` without being
forwarded (nothing applied), as a hot partition throttles. `counts` tells how many write items
were forwarded (`written`) and refused (`throttled`).

Deterministic given the arrival times: no randomness.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from support.faultproxy import WRITES, FaultProxy, Request, _error, _write

THROTTLED = "ProvisionedThroughputExceededException"


def items_written(request: Request) -> int:
    """How many items a write request writes (a transaction or a batch: each of its items)."""
    if request.operation == "TransactWriteItems":
        return len(json.loads(request.body).get("TransactItems", ()))
    if request.operation == "BatchWriteItem":
        tables = json.loads(request.body).get("RequestItems", {})
        return sum(len(entries) for entries in tables.values())
    return 1


class CappedProxy(FaultProxy):
    """See the module docstring."""

    def __init__(
        self, upstream: str, per_second: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(upstream, seed=0, rate=0.0)
        self.per_second = per_second
        self.clock = clock
        self._tokens = per_second
        self._at = clock()

    def take(self, items: int) -> bool:
        """Whether a write of `items` items may go to the table now (taking their tokens)."""
        now = self.clock()
        self._tokens = min(self.per_second, self._tokens + (now - self._at) * self.per_second)
        self._at = now
        if self._tokens < items:
            return False
        self._tokens -= items
        return True

    async def _answer(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        self.requests += 1
        if request.operation in WRITES:
            items = items_written(request)
            if not self.take(items):
                self.counts["throttled"] += items
                return await _write(writer, *_error(400, THROTTLED))
            self.counts["written"] += items
        return await _write(writer, *await self._forward(request))


@asynccontextmanager
async def capped_proxy(upstream: str, per_second: float) -> AsyncIterator[CappedProxy]:
    proxy = CappedProxy(upstream, per_second)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
