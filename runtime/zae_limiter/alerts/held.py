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

**What the alert reports** (`crossed_at`, `used`, `capacity`): a write whose level was made of
consumption that stayed. That is the crossing write, unless a refund judged the crossing again
and took back a debit that write's level held (a debit of the refunding writer at or below its
entry in that write's evidence, or, its entry absent, at or below the evidence floor): then the
crossing is reported at that refund, with the use it left (every never-kept debit on the item
before it has been refunded by then, or a later refund judges it again). The write between the
two at which what stayed first reached the threshold (a later debit that stayed) is not
reported: what a refunded debit weighed in each earlier write's level is not in the stream (a
refund's write may fold other calls' debits, so its images give only the net change, and a
revoked sequence names a write that may also carry debits of calls that stayed). A debit its
writer sent without evidence (an item full of young writers' entries, core/evidence.py) counts
as after the reported write when its writer's entry there is below it: the crossing then keeps
that write's time and use (it is still stored, as the refund left the item at or above the
threshold). A refund in a later quota period does not judge the crossing; one of a rate limit
may be in a later refill period than the crossing's `period_start`.

**Late and concurrent writes.** A held crossing's item changes only by a write conditional on
the state it was planned from. The item records the stream position of the record that wrote
it (`at`: its sequence number, fixed width; taken to grow along an item's records, which the
stream delivers in order, across its shards too): an update or a drop applies only while the
item still holds the state it was read as, and a new crossing is held only where nothing is,
or where one ended at an earlier record. A drop leaves the item *ended* (not deleted: its
position stays until its TTL), and so does a confirmed crossing. So a write from an invocation
that timed out or froze, landing after a newer one, is refused. Unconditional, it re-held a
dropped crossing (a later record then stored the alert a refund had taken back), moved `seen`
back (the sweep then waited for a record that never came: the alert was never stored), or
deleted a crossing held again after a drop (tests/aggregator/test_alerts.py, "a late write").
A refused write reads the item again: a state written at this record or a later one is taken
as it is (another aggregator got there first; its records are skipped there), an earlier one
is judged by this record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.bounds import ASSUMED_SKEW_MS, MAX_REQUEST_TIMEOUT_S
from ..core.images import BucketImage
from ..dynamo import bucket_attributes as attrs
from ..dynamo import bucket_items, keys
from ..dynamo.failures import ConditionFailed
from ..dynamo.store import Store
from ..dynamo.stream_records import MalformedRecord, StreamRecord
from .detect import crossings
from .held_state import Bucket, Disposition, Held, held_of, step, stream_position, writer_of
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

#: Attempts at one held crossing's write that meet a newer state before the record fails.
ATTEMPTS = 8
_NAMES = {"#at": "at", "#end": "ended"}
#: A new crossing is held where nothing is held, or where one ended at an earlier record.
_CREATE = "attribute_not_exists(PK) OR (attribute_exists(#end) AND #at < :at)"


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
            held = {h.key["SK"]: h for h in await self.load()}
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
                held = {h.key["SK"]: h for h in await self.load()}
        await self.sweep(tally, held if records else None)

    async def load(self) -> list[Held]:
        """Every crossing held now (not the ended ones)."""
        items = await self._store.query_all(keys.HELD_CROSSINGS_PK, consistent=True)
        return [h for h in map(held_of, items) if h is not None]

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
        at = stream_position(record.sequence_number)
        here = [h for h in held.values() if h.bucket == bucket]
        refund = _revoking(new_raw, old_raw)
        for h in here:
            await self._apply(h, image, refund, at, held, tally)
        writer, seq = writer_of(image, old_raw)
        for crossing in crossings(record):
            until = image.written_at + self.hold_ms
            new = Held(
                crossing, image.shard, until, image.writes, writer, seq, at, image.evidence,
                image.floor,
            )  # fmt: skip
            if new.key["SK"] in held:
                continue  # a crossing of this threshold in this period is held already
            await self._hold(new, image, refund, held, tally)

    async def _apply(
        self,
        h: Held,
        image: BucketImage,
        refund: tuple[str, tuple[int, ...]] | None,
        at: str,
        held: dict[str, Held],
        tally: Tally,
    ) -> None:
        """`step` on `h` and its write, conditional on `h` being what its item holds; when it is
        not, on what it holds (module docstring, "Late and concurrent writes")."""
        sk = h.key["SK"]
        for _ in range(ATTEMPTS):
            if h.at >= at:  # this record (or a later one) is in it already
                held[sk] = h
                return
            what, after = step(h, image, refund, self.hold_ms, at)
            if what is Disposition.CONFIRM:
                await self._confirm(after, tally, at, image.written_at)
                held.pop(sk, None)
                return
            try:
                if what is Disposition.KEEP:
                    held[sk] = after
                elif what is Disposition.DROP:
                    await self._replace(h, after.ended(at, "dropped", image.written_at))
                    del held[sk]
                    self._log_drop(h, image, refund)
                else:
                    await self._replace(h, after.item())
                    held[sk] = after
                return
            except ConditionFailed:
                current = await self._store.get(h.key, consistent=True)
                now = None if current is None else held_of(current)
                if now is None:  # dropped or confirmed meanwhile
                    held.pop(sk, None)
                    return
                h = now
        raise RuntimeError(f"held crossing {sk} kept changing under this aggregator's writes")

    async def _hold(
        self,
        new: Held,
        image: BucketImage,
        refund: tuple[str, tuple[int, ...]] | None,
        held: dict[str, Held],
        tally: Tally,
    ) -> None:
        """Hold a new crossing, unless its item holds one already or ended it at this record or
        a later one (an earlier delivery of it, another aggregator)."""
        sk = new.key["SK"]
        for _ in range(ATTEMPTS):
            try:
                await self._store.put(
                    new.item(), condition=_CREATE, names=_NAMES, values={":at": new.at}
                )
                held[sk] = new
                return
            except ConditionFailed:
                current = await self._store.get(new.key, consistent=True)
            if current is None:
                continue  # gone meanwhile (its TTL): hold it again
            standing = held_of(current)
            if standing is not None:  # held already: this record judges it as any other
                await self._apply(standing, image, refund, new.at, held, tally)
                return
            if str(current.get("at", "")) >= new.at:
                return  # ended at this record or a later one
        raise RuntimeError(f"held crossing {sk} kept changing under this aggregator's writes")

    async def _replace(self, h: Held, item: dict[str, Any]) -> None:
        """Write `item` over `h`'s item if it still holds `h` (ConditionFailed otherwise)."""
        if h.at:
            condition = "attribute_not_exists(#end) AND #at = :read"
            await self._store.put(item, condition=condition, names=_NAMES, values={":read": h.at})
        else:  # written before positions
            condition = "attribute_exists(PK) AND attribute_not_exists(#at)"
            await self._store.put(item, condition=condition, names={"#at": "at"})

    def _log_drop(
        self, h: Held, image: BucketImage, refund: tuple[str, tuple[int, ...]] | None
    ) -> None:
        self.dropped += 1
        log.info(
            "dropped the %d%% crossing of %s/%s/%s: %s refunded the debits behind it",
            h.crossing.threshold,
            image.entity_id,
            image.resource,
            h.crossing.limit,
            refund[0] if refund is not None else "",
        )

    async def _confirm(self, h: Held, tally: Tally, at: str, when: int) -> None:
        """Store `h`'s alert and end its item. The end is not conditional: once the alert is
        stored, whatever state its item holds (a late write's) can only store it again, which
        its conditional put refuses."""
        stored, published = await self._recorder.record(h.crossing)
        tally.alerts_stored += stored
        tally.alerts_published += published
        await self._store.put(h.ended(at, "stored", when))

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
        due = list(held.values()) if held is not None else await self.load()
        for h in sorted(due, key=lambda h: h.until):
            if h.until > now:
                continue
            current = await self._store.get(keys.bucket(*h.bucket), consistent=True)
            if current is not None and int(current.get(attrs.WRITES, 0)) != h.seen:
                continue  # writes the stream has not brought yet: a later record decides
            try:
                await self._confirm(h, tally, h.at, now)
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
