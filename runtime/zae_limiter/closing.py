"""`Repository.close()`: drain the work still being resolved off callers' paths within a
bound, then stop every writer and log what is left, one structured line per item
(docs/on-unavailable.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from .acquire import Admission
from .acquire.pending import Pending

log = logging.getLogger("zae_limiter")


async def close_writers(pending: Pending, admissions: Sequence[Admission], limit: float) -> None:
    """Wait at most `limit` seconds for `pending`; past it give up (see `_give_up`). Holds still
    open lapse after their `lease_ttl`: their renewals stop first."""
    for admission in admissions:
        admission.renewals.stop()
    try:
        if not await pending.drain(limit):
            await _give_up(pending, admissions, limit)
    finally:
        pending.closed = True
        pending.refund_log.flush()
        for admission in admissions:
            admission.waves.lanes.closed = True
            admission.finder.close()


async def _give_up(pending: Pending, admissions: Sequence[Admission], limit: float) -> None:
    """close()'s bound passed: stop every writer's lanes (what they hold is logged), end the
    rest of the pending work, and count the items left."""
    lanes = [admission.waves.lanes for admission in admissions]
    tasks = [task for writer in lanes for task in writer.close()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ended = await pending.abandon()
    left = sum(writer.leftovers.flush() for writer in lanes)
    pending.abandoned_at_close += left
    log.error(
        "close(): gave up after %g s with %d items left unresolved (one line each above; "
        "docs/on-unavailable.md says how to settle them), %d pending tasks ended",
        limit,
        left,
        ended,
    )
