"""`cancel_on_hold_lost` of the ASGI middleware and the Lambda decorator (docs/concurrency.md):
the request's work is cancelled as soon as a concurrency hold of its lease is lost."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from ..acquire.lease import Lease
from ..errors import RateLimiterUnavailable

T = TypeVar("T")


async def cancelled_on_hold_lost(lease: Lease, work: Awaitable[T]) -> T:
    """`await work`, cancelled as soon as a concurrency hold of `lease` is lost: then it raises
    `RateLimiterUnavailable` (inside the lease's block, so the lease is refunded). The
    integrations' `cancel_on_hold_lost`."""
    task = asyncio.ensure_future(work)
    lost = asyncio.ensure_future(lease.wait_hold_lost())
    try:
        await asyncio.wait({task, lost}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, lost):
            if not pending.done():
                pending.cancel()
        await asyncio.wait({task, lost})
    if not task.cancelled():
        return task.result()  # done first (or both: the work's answer stands)
    raise RateLimiterUnavailable(
        "the request's concurrency hold was lost (its renewals failed for a lease_ttl, or "
        "another writer freed it), so the request was cancelled; retry it"
    )
