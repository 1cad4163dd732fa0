"""The aggregator's side of alerts: store each crossing once, publish each stored alert once.

Exactly once: the alert item's key is the crossing's identity (entity, resource, limit, period,
threshold), and it is written only if absent, so redeliveries, retries, bisected batches and two
aggregators racing on the same records store it once, and only the writer whose put landed
claims its publication. Publishing: the item is stored unpublished (`pub` 0) and claimed
(`claim`, the claimant's clock); after a successful put to the sink, `pub` becomes 1. When the
sink fails the claim is released and the record fails (partial batch response), so its retry
publishes the stored alert: not lost, and not published twice unless a process dies between the
sink's success and the mark (the alert's stable `alert_id` lets consumers drop that repeat). A
claim left by a process that died expires after `CLAIM_MS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..dynamo.failures import ConditionFailed
from ..dynamo.store import Store
from .event import PUBLISHED, UNPUBLISHED, AlertEvent, Crossing, event_from_item

#: Publishes one alert (its namespace's id and name, the event); raises if not accepted.
AlertSink = Callable[[str, str, AlertEvent], Awaitable[None]]
#: The name of a namespace, by its id (the aggregator reads the registry; the id if unknown).
NamespaceName = Callable[[str], Awaitable[str]]
CLAIM_MS = 30_000
#: Days a stored alert is kept after its crossing (the aggregator's `ALERT_RETENTION_DAYS`).
DEFAULT_ALERT_RETENTION_DAYS = 90
#: Seconds a crossing is held before it is stored (`alerts.held`; the aggregator's
#: `ALERT_HOLD_SECONDS`).
DEFAULT_ALERT_HOLD_SECONDS = 300
_NAMES = {"#p": "pub", "#c": "claim"}


class Tally(Protocol):
    """What a batch's alerts are counted into (the aggregator's `BatchResult`)."""

    failures: dict[int, BaseException]
    alerts_stored: int
    alerts_published: int


class AlertPending(Exception):
    """Another aggregator holds the alert's publication claim: the record is retried later."""


class AlertRecorder:
    """Stores crossings and publishes them through `sink` (None: store only)."""

    def __init__(
        self,
        store: Store,
        sink: AlertSink | None,
        clock: Callable[[], int],
        retention_days: int = DEFAULT_ALERT_RETENTION_DAYS,
        namespace_name: NamespaceName | None = None,
    ) -> None:
        self._store = store
        self._sink = sink
        self._clock = clock
        self._retention_days = retention_days
        self._namespace_name = namespace_name

    async def record(self, crossing: Crossing) -> tuple[bool, bool]:
        """(stored by this call, published by this call)."""
        now = self._clock()
        ttl = crossing.crossed_ms // 1000 + self._retention_days * 86400
        item = crossing.item(ttl, publish=self._sink is not None, now_ms=now)
        claimed: dict[str, Any] | None = item
        stored = True
        try:
            await self._store.put(item, condition="attribute_not_exists(PK)")
        except ConditionFailed:
            stored = False
            claimed = await self._claim(crossing.key, now) if self._sink is not None else None
        if claimed is None or self._sink is None:
            return stored, False
        ns = str(claimed["ns"])
        name = await self._namespace_name(ns) if self._namespace_name is not None else ns
        try:
            await self._sink(ns, name, event_from_item(claimed))
        except BaseException:
            await self._release(crossing.key, int(claimed["claim"]))
            raise
        await self._store.update(
            crossing.key,
            "SET #p = :done REMOVE #c",
            names=_NAMES,
            values={":done": PUBLISHED},
            return_new=False,
        )
        return stored, True

    async def _claim(self, key: dict[str, str], now: int) -> dict[str, Any] | None:
        """The stored alert, claimed for publication by this call; None if nothing to publish."""
        try:
            return await self._store.update(
                key,
                "SET #c = :now",
                condition="#p = :open AND (attribute_not_exists(#c) OR #c < :stale)",
                names=_NAMES,
                values={":now": now, ":open": UNPUBLISHED, ":stale": now - CLAIM_MS},
            )
        except ConditionFailed as failed:
            if failed.item is None or failed.item.get("pub") != UNPUBLISHED:
                return None  # published already, or stored by an aggregator without a sink
            raise AlertPending(
                f"alert {failed.item.get('alert_id')} is being published by another aggregator"
            ) from None

    async def _release(self, key: dict[str, str], claim: int) -> None:
        """Give up this call's claim so that the record's retry publishes at once."""
        try:
            await self._store.update(
                key,
                "REMOVE #c",
                condition="#c = :mine AND #p = :open",
                names=_NAMES,
                values={":mine": claim, ":open": UNPUBLISHED},
                return_new=False,
            )
        except Exception:  # the claim expires after CLAIM_MS instead
            return
