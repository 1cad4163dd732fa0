"""Refunds for callers that had left, logged as one WARNING per interval with a count per item.

An outage can leave hundreds of such refunds (one per caller that passed its deadline); one line
per refund buried the log. The first refund of an interval starts it; when it ends, one WARNING
names every item refunded in it with its count (the 20 busiest, then how many more).
`flush()` (at close) logs what is counted so far.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from ..core.images import BucketImage

log = logging.getLogger("zae_limiter")

#: Seconds one WARNING line covers.
INTERVAL_S = 10.0
#: Items named in one line at most.
NAMED = 20


class RefundLog:
    """Counts refunds per item key and logs them once per interval."""

    def __init__(self, interval: float = INTERVAL_S) -> None:
        self.interval = interval
        self._counts: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None

    def refunded(self, image: BucketImage) -> None:
        """A refund landed for a caller that had left, on `image`'s item."""
        key = f"{image.ns}/{image.entity_id}/{image.resource} shard {image.shard}"
        self._counts[key] += 1
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self.flush)

    def flush(self) -> None:
        """Log what was counted since the last line (nothing if nothing was)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._counts:
            return
        busiest = self._counts.most_common(NAMED)
        named = ", ".join(f"{key} x{count}" for key, count in busiest)
        more = len(self._counts) - len(busiest)
        log.warning(
            "refunded after their callers' deadline or cancellation (within %g s): %d refunds "
            "on %d items: %s%s",
            self.interval,
            self._counts.total(),
            len(self._counts),
            named,
            f", and {more} more items" if more else "",
        )
        self._counts.clear()
