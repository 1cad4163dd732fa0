"""Renewals of this process's concurrency holds (core.hold_ledger, docs/concurrency.md).

While a lease holds a concurrency limit, its process renews the entry the hold is on: every
write the process makes to the item renews it on the way (planning folds it in), and a
background task writes a renewal to each item whose entries were last written `lease_ttl / 3`
ago, at most once per item per that span. The task runs only while something is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..caches import ImageCache
from ..core import hold_writes
from ..core.hold_ledger import Ledger
from ..core.holds import RENEW_DIVISOR
from .lanes import Lanes
from .values import ENTITY, PlanResult, Target

log = logging.getLogger("zae_limiter")

#: Renewal writes are retried like exit writes (they never refuse).
RENEW_ROUNDS = 8


def renew_planner(ledger: Ledger) -> Callable[[Target, int], PlanResult]:
    """Renew every entry of this writer on the target's item that is due (nothing else)."""

    def plan(target: Target, now: int) -> PlanResult:
        image = target.image
        item = (image.ns, image.entity_id, image.resource, image.shard)
        writes = {}
        for params in image.stamp.limits:
            holder = ledger.renewal(item, params.name, now, params.period_ms)
            state = image.states.get(params.name)
            if holder is not None and state is not None:
                writes[params.name] = hold_writes.plan_renew(state, now, holder)
        return writes, 0

    return plan


class Renewals:
    """The background renewal task of one writer (its `Lanes`)."""

    def __init__(self, lanes: Lanes, images: ImageCache, clock: Callable[[], int]) -> None:
        self.lanes = lanes
        self.images = images
        self.clock = clock
        self.writes = 0  # renewal writes sent (a metric)
        self._task: asyncio.Future[None] | None = None
        self.stopped = False

    def start(self) -> None:
        """Run the task if something is held and it is not running."""
        if self.stopped or (self._task is not None and not self._task.done()):
            return
        if self.lanes.ledger.holding():
            self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        """No more renewals (the repository closes): holds lapse after their lease_ttl."""
        self.stopped = True
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        ledger = self.lanes.ledger
        while ledger.holding() and not self.stopped:
            await asyncio.sleep(ledger.shortest_ttl() / RENEW_DIVISOR / 2 / 1000)
            try:
                await self.renew_due()
            except Exception as exc:  # the next round tries again; a lapse is told to leases
                log.warning("renewing concurrency holds failed: %s", exc)

    async def renew_due(self) -> int:
        """Write one renewal to every item with entries due now; returns the writes that
        landed."""
        ledger = self.lanes.ledger
        items: dict[Any, list[str]] = defaultdict(list)
        for item, limit in ledger.due(self.clock()):
            items[item].append(limit)
        jobs = []
        for item in items:
            cached = self.images.get(item)
            if cached is None:
                continue  # evicted: the next write to it (or the lapse) decides
            image = cached[0]
            target = Target(
                image.entity_id,
                image.resource,
                ENTITY,
                image,
                exists=True,
                seen_at=self.clock(),
                read_now=False,
            )
            jobs.append(
                self.lanes.write(target, renew_planner(ledger), settle=True, rounds=RENEW_ROUNDS)
            )
        outcomes = await asyncio.gather(*jobs, return_exceptions=True)
        landed = sum(1 for o in outcomes if not isinstance(o, BaseException) and o.image)
        self.writes += len(jobs)
        return landed
