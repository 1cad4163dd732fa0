"""Only consumption that stays alerts: crossings are held until no refund can take them back.

A debit whose caller was refused (all or none), timed out or cancelled is refunded by its own
writer, later, possibly minutes later after an outage, and a debit never kept must never cause
an alert (docs/alerts.md, "Only consumption that stays"). Such a refund says so on the item:
its write sets `bucket_attributes.REVOKED` (``rf``, "writer:sequences"), which the stream carries.
So a crossing (`detect.crossings`) is not stored at once: it is *held* (an item in the table's
one held-crossings partition, `keys.held_crossing`) and, per record of its bucket item, in the
order the stream gives them:

- a refund of never-kept debits on the item judges every crossing held there again, on the
  item as the refund left it: below the threshold (in the same quota period), the crossing is
  *dropped*; still at or above it, it stays held and its hold runs from the refund (debits
  between the crossing and the refund may be refunded too);
- a record written at least `HOLD_MS` plus the clock skew after the hold began *confirms* it:
  every refund that could take it back came before, in the item's order;
- otherwise the crossing waits for the *sweep*: once its hold has passed on the aggregator's
  clock and the item's write counter (``k``) is still the one last seen in the stream (no write
  left to read), it is confirmed.

Confirming stores the alert exactly as before (`AlertRecorder.record`: once per crossing,
published once). The assumption that makes this exact: a refund of a never-kept debit is sent
within `REFUND_HORIZON_MS` of the debit (the writer's clock; it lands within one request's
timeouts) and clocks agree within the skew the exactly-once rules assume. An alert is stored
at most `HOLD_MS` (plus the clock skew on a busy item, plus the sweep's interval) after the
crossing write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..core.bounds import ASSUMED_SKEW_MS, MAX_REQUEST_TIMEOUT_S
from ..core.bucket import Kind
from ..core.images import BucketImage
from ..dynamo import bucket_attributes as attrs
from ..dynamo import bucket_items, keys
from ..dynamo.failures import ConditionFailed
from ..dynamo.store import Store
from ..dynamo.stream_records import MalformedRecord, StreamRecord
from .detect import crossings, use_of
from .event import Crossing
from .recorder import (
    DEFAULT_ALERT_HOLD_SECONDS,
    AlertRecorder,
    AlertSink,
    NamespaceName,
    Tally,
)

log = logging.getLogger("zae_limiter.alerts")

#: How long after the crossing write a crossing is held by default (ms; the aggregator's
#: `ALERT_HOLD_SECONDS` setting).
HOLD_MS = DEFAULT_ALERT_HOLD_SECONDS * 1000
#: A refund sent within this of its debit (the writer's clock) is always in time (ms).
REFUND_HORIZON_MS = HOLD_MS - int(MAX_REQUEST_TIMEOUT_S * 1000) - ASSUMED_SKEW_MS
#: The sweep runs at most this often per aggregator (ms of its clock).
SWEEP_MS = 10_000

Bucket = tuple[str, str, str, int]


class AlertSettings(Protocol):
    """What the held crossings take of the aggregator's settings (`AggregatorSettings`)."""

    @property
    def alert_retention_days(self) -> int: ...

    @property
    def alert_hold_seconds(self) -> int: ...


@dataclass
class Swept:
    """What a sweep stored and published (and the failures it logged, by crossing)."""

    failures: dict[int, BaseException] = field(default_factory=dict)
    alerts_stored: int = 0
    alerts_published: int = 0


@dataclass(frozen=True)
class Held:
    """One held crossing: where, until when, and the bucket's write count last seen."""

    crossing: Crossing
    shard: int
    until: int  # the aggregator may confirm it from then (epoch ms)
    seen: int  # the bucket item's write counter `k` in the last record read
    writer: str  # whose write crossed (for the log)
    seq: int

    @property
    def bucket(self) -> Bucket:
        c = self.crossing
        return (c.ns, c.entity_id, c.resource, self.shard)

    @property
    def key(self) -> dict[str, str]:
        c = self.crossing
        return keys.held_crossing(c.ns, c.entity_id, self.shard, c.key["SK"])

    def item(self) -> dict[str, Any]:
        c = self.crossing
        return {
            **self.key,
            "ns": c.ns,
            "entity_id": c.entity_id,
            "resource": c.resource,
            "limit_name": c.limit,
            "threshold": c.threshold,
            "period_ms": c.period_ms,
            "crossed_ms": c.crossed_ms,
            "used_milli": c.used_milli,
            "capacity_milli": c.capacity_milli,
            "soft": c.soft,
            "rearm": c.rearm,
            "shard": self.shard,
            "until": self.until,
            "seen": self.seen,
            "writer": self.writer,
            "seq": self.seq,
            "ttl": self.until // 1000 + 86_400,
        }


def _held_of(item: dict[str, Any]) -> Held:
    crossing = Crossing(
        ns=str(item["ns"]),
        entity_id=str(item["entity_id"]),
        resource=str(item["resource"]),
        limit=str(item["limit_name"]),
        threshold=int(item["threshold"]),
        period_ms=int(item["period_ms"]),
        crossed_ms=int(item["crossed_ms"]),
        used_milli=int(item["used_milli"]),
        capacity_milli=int(item["capacity_milli"]),
        soft=bool(item["soft"]),
        rearm=int(item.get("rearm", 0)),
    )
    return Held(
        crossing,
        int(item["shard"]),
        int(item["until"]),
        int(item["seen"]),
        str(item.get("writer", "")),
        int(item.get("seq", 0)),
    )


class HeldCrossings:
    """Holds, drops and confirms crossings for one aggregator (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        recorder: AlertRecorder,
        clock: Callable[[], int],
        *,
        hold_ms: int = HOLD_MS,
        sweep_ms: int = SWEEP_MS,
    ) -> None:
        self._store = store
        self._recorder = recorder
        self._clock = clock
        self.hold_ms = hold_ms
        self.sweep_ms = sweep_ms
        self._swept_at: int | None = None
        self.dropped = 0  # crossings a refund took back (a metric)

    @classmethod
    def of(
        cls,
        store: Store,
        sink: AlertSink | None,
        clock: Callable[[], int],
        settings: AlertSettings,
        namespace_name: NamespaceName | None = None,
    ) -> HeldCrossings:
        """The held crossings of an aggregator with these settings, storing alerts to `sink`
        (named by `namespace_name`)."""
        recorder = AlertRecorder(store, sink, clock, settings.alert_retention_days, namespace_name)
        return cls(store, recorder, clock, hold_ms=settings.alert_hold_seconds * 1000)

    async def batch(self, records: list[tuple[int, StreamRecord]], tally: Tally) -> None:
        """Follow a batch's bucket records with thresholds (in stream order), then sweep.

        After a record of an item fails, the item's later records in the batch are not followed:
        the stream delivers them again after it (Lambda and the local runner resume at the first
        failed record), and one read before it would judge the item out of its order (a later
        record would confirm a crossing, or tell the sweep that nothing is left to read, while
        the refund that drops it waits to be retried)."""
        held: dict[str, Held] = {}
        if records:
            held = {h.key["SK"]: h for h in await self._load()}
        failed: set[str] = set()  # items (their keys) with a record that failed in this batch
        for position, record in records:
            if record.pk in failed:
                continue
            try:
                await self._follow(record, held, tally)
            except MalformedRecord as exc:
                tally.failures[position] = exc
                failed.add(record.pk)
            except Exception as exc:  # the record is retried; the hold items stay as they are
                tally.failures[position] = exc
                failed.add(record.pk)
                held = {h.key["SK"]: h for h in await self._load()}
        await self.sweep(tally, held if records else None)

    async def _load(self) -> list[Held]:
        items = await self._store.query_all(keys.HELD_CROSSINGS_PK, consistent=True)
        return [_held_of(item) for item in items]

    async def _follow(self, record: StreamRecord, held: dict[str, Held], tally: Tally) -> None:
        new_raw, old_raw = record.image("new"), record.image("old")
        if new_raw is None:
            return
        try:
            image = bucket_items.parse(new_raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedRecord(
                f"record {record.event_id}: unreadable bucket image: {exc}"
            ) from None
        bucket: Bucket = (image.ns, image.entity_id, image.resource, image.shard)
        here = [h for h in held.values() if h.bucket == bucket]
        refund = _revoking(new_raw, old_raw)
        for h in here:
            sk = h.key["SK"]
            if refund is not None:
                if _dropped(h, image):
                    await self._store.delete(h.key)
                    del held[sk]
                    self.dropped += 1
                    log.info(
                        "dropped the %d%% crossing of %s/%s/%s: %s refunded the debits behind it",
                        h.crossing.threshold,
                        image.entity_id,
                        image.resource,
                        h.crossing.limit,
                        refund[0],
                    )
                    continue
                h = replace(h, until=max(h.until, image.written_at + self.hold_ms))
            if image.written_at >= h.until + ASSUMED_SKEW_MS:
                await self._confirm(h, tally)
                del held[sk]
                continue
            if h.seen != image.writes or refund is not None:
                h = replace(h, seen=image.writes)
                await self._store.put(h.item())
            held[sk] = h
        writer, seq = _writer_of(image, old_raw)
        for crossing in crossings(record):
            until = image.written_at + self.hold_ms
            new = Held(crossing, image.shard, until, image.writes, writer, seq)
            sk = new.key["SK"]
            if sk in held:
                continue  # a crossing of this threshold in this period is held already
            with contextlib.suppress(ConditionFailed):  # (held by an earlier delivery of it)
                await self._store.put(new.item(), condition="attribute_not_exists(PK)")
            held[sk] = new

    async def _confirm(self, h: Held, tally: Tally) -> None:
        stored, published = await self._recorder.record(h.crossing)
        tally.alerts_stored += stored
        tally.alerts_published += published
        await self._store.delete(h.key)

    async def sweep(
        self, tally: Tally, held: dict[str, Held] | None = None, *, force: bool = False
    ) -> None:
        """Confirm held crossings whose hold has passed on an item with no write left to read
        (at most once per `sweep_ms`, unless `force`)."""
        now = self._clock()
        recent = self._swept_at is not None and 0 <= now - self._swept_at < self.sweep_ms
        if recent and not force:
            return
        self._swept_at = now
        due = list(held.values()) if held is not None else await self._load()
        for h in sorted(due, key=lambda h: h.until):
            if h.until > now:
                continue
            current = await self._store.get(keys.bucket(*h.bucket), consistent=True)
            if current is not None and int(current.get(attrs.WRITES, 0)) != h.seen:
                continue  # writes the stream has not brought yet: a later record decides
            try:
                await self._confirm(h, tally)
            except Exception as exc:  # the next sweep tries again
                log.warning("storing held alert %s failed: %s", h.crossing.alert_id, exc)

    async def sweep_now(self) -> Swept:
        """`sweep` at once (the local runner, when it has caught up); what it stored."""
        swept = Swept()
        await self.sweep(swept, force=True)
        return swept


def _revoking(
    new_raw: dict[str, Any], old_raw: dict[str, Any] | None
) -> tuple[str, tuple[int, ...]] | None:
    """(writer, sequences) when this write refunds never-kept debits (it set `REVOKED`)."""
    marker = bucket_items.revoked(new_raw)
    if marker is None or marker == bucket_items.revoked(old_raw):
        return None
    return marker


def _dropped(h: Held, image: BucketImage) -> bool:
    """Whether the item as a refund left it is below the held threshold (same quota period)."""
    c = h.crossing
    params = image.stamp.params(c.limit)
    state = image.states.get(c.limit)
    if params is None or state is None:
        return True  # the limit is gone: nothing stays to alert on
    used, cap, period = use_of(params, state, image)
    if params.kind in (Kind.CALENDAR, Kind.SESSION) and period != c.period_ms:
        return False  # a later period: the refund cannot reach the crossing's
    return cap <= 0 or used * 100 < c.threshold * cap


def _writer_of(image: BucketImage, old_raw: dict[str, Any] | None) -> tuple[str, int]:
    """The writer whose entry this write set, and its sequence ("", 0 for an admin write)."""
    old = {} if old_raw is None else bucket_items.parse(old_raw).evidence
    for writer, seq in image.evidence.items():
        if old.get(writer) != seq:
            return writer, seq
    return "", 0
