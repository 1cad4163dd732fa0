"""The usage aggregator: applies a batch of stream records to usage snapshots, exactly once.

Shared by the Lambda (`lambdas/aggregator/handler.py`) and the local stream runner
(`zae_limiter.local.stream_runner`); both hand it the records of a DynamoDB Streams event.

Exactly once: each record that changes a counter is applied in a DynamoDB transaction together
with a marker item keyed by the record's `eventID` (`keys.aggregation_marker`), written only if
absent. A redelivered record finds its marker, so the transaction is cancelled with that marker's
`ConditionalCheckFailed`; the record is then known to be applied already and is dropped from the
transaction, which is sent again for the rest. This is exact whatever the order of delivery: across
stream shards, after a partial batch failure, on a DLQ redrive or with a parallelization factor.
Records are grouped into transactions of at most 100 items (their markers, one check per entity,
plus the distinct snapshots they touch, each updated once with the summed change), so a batch
costs 2 WCU per record (marker) + 2 per entity (check) + 2 per distinct snapshot per transaction.

Deleted entities: `delete_entity` leaves a usage tombstone (`keys.usage_tombstone`, its time in
`deleted_ms`). Each transaction checks, per entity, that no tombstone is at or after the oldest
write it applies; when one is, the records of writes up to the deletion are dropped (counted as
ignored) and the rest sent again. The check is inside the transaction, so a delete racing a batch
can never leave snapshots behind: either the batch landed first (and the delete removes its
snapshots) or the check sees the tombstone. A transaction that fails for a reason other than
throttling or contention is halved until the failing record is alone; only that record is
reported failed, everything else is applied. Threshold alerts: `alerts.recorder`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import namespace_labels, versioning
from ..alerts.detect import asks_for_alerts
from ..alerts.held import HeldCrossings
from ..alerts.recorder import AlertSink
from ..dynamo import keys, multi_region, stream_records, transport
from ..dynamo.store import Store
from ..dynamo.stream_records import MalformedRecord, StreamRecord
from ..dynamo.transport import (
    AccessDenied,
    DynamoUnavailable,
    TableMissing,
    TransactionCancelled,
    Transport,
    UnknownOutcome,
)
from ..errors import IncompatibleSchemaError, InfrastructureNotFoundError
from ..schema import SCHEMA_VERSION
from . import records as usage_records
from . import snapshot_items
from .aggregator_outcome import BatchResult as BatchResult
from .aggregator_outcome import MetricPoint as MetricPoint
from .aggregator_outcome import metric_points
from .aggregator_settings import DEFAULT_MARKER_TTL_HOURS as DEFAULT_MARKER_TTL_HOURS
from .aggregator_settings import AggregatorSettings as AggregatorSettings
from .records import BucketChange
from .snapshot_items import Counts, SnapshotKey
from .snapshot_writes import SnapshotWrites
from .windows import bounds

log = logging.getLogger("zae_limiter.usage.aggregator")

MAX_TRANSACTION_ITEMS = 100
ATTEMPTS = 5
DEFAULT_RETENTION_DAYS = 90
VERSION_CHECK_INTERVAL_MS = 300_000
_TRANSIENT_REASONS = frozenset(
    {
        "TransactionConflict",
        "ProvisionedThroughputExceeded",
        "ThrottlingError",
        "RequestLimitExceeded",
    }
)

ArchiveSink = Callable[[str, bytes], Awaitable[None]]
_NOT_WARNED = object()


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Pending:
    position: int
    record: StreamRecord
    change: BucketChange
    snapshots: dict[SnapshotKey, Counts]

    @property
    def event_id(self) -> str:
        return self.record.event_id


class Aggregator:
    """Applies stream batches to one table's usage snapshots. Use `connect()` or pass a Store."""

    def __init__(
        self,
        store: Store,
        settings: AggregatorSettings | None = None,
        *,
        clock: Callable[[], int] | None = None,
        archive: ArchiveSink | None = None,
        transport_owned: Transport | None = None,
        alerts: AlertSink | None = None,
    ) -> None:
        self._store = store
        self.settings = settings or AggregatorSettings()
        self._clock = clock or _system_clock
        self._archive = archive
        self.held = HeldCrossings.of(
            store, alerts, self._clock, self.settings, self._namespace_name
        )  # (alerts)
        self._transport = transport_owned
        self._version_record: dict[str, Any] | None = None
        self._version_checked_at: int | None = None
        self._warned_version: object = _NOT_WARNED
        self._namespace_names: dict[str, str] = {}
        self._one_at_a_time = SnapshotWrites(store, self._clock, self._snapshot_ttl)

    @classmethod
    async def connect(
        cls,
        table: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        settings: AggregatorSettings | None = None,
        clock: Callable[[], int] | None = None,
        archive: ArchiveSink | None = None,
        client_config: Any = None,
        alerts: AlertSink | None = None,
    ) -> Aggregator:
        conn = await Transport.connect(
            region=region, endpoint_url=endpoint_url, client_config=client_config
        )
        store = Store(conn, table)
        try:  # a table with multi-Region strong consistency has no transactions
            store.multi_region = multi_region.from_description(
                await store.describe_table(), conn.region
            )
        except BaseException:
            await conn.close()
            raise
        return cls(
            store, settings, clock=clock, archive=archive, transport_owned=conn, alerts=alerts
        )

    async def close(self) -> None:
        if self._transport is not None:
            await self._transport.close()

    @property
    def table(self) -> str:
        return self._store.table

    @property
    def store(self) -> Store:
        return self._store

    # --- version check -----------------------------------------------------------------------

    async def check_version(self) -> dict[str, Any]:
        """Read the version record (at most every 5 minutes); raise if the schema is foreign."""
        now = self._clock()
        if (
            self._version_record is not None
            and self._version_checked_at is not None
            and 0 <= now - self._version_checked_at < VERSION_CHECK_INTERVAL_MS
        ):
            return self._version_record
        record = await self._store.get(keys.version_record())
        if record is None:
            raise InfrastructureNotFoundError(self._store.table)
        schema = str(record.get("schema_version") or "0")
        if versioning.parse(schema).major != versioning.parse(SCHEMA_VERSION).major:
            raise IncompatibleSchemaError(
                versioning.LIBRARY_VERSION,
                schema,
                f"table {self._store.table!r} has schema {schema}; this aggregator "
                f"({versioning.LIBRARY_VERSION}) reads schema {SCHEMA_VERSION} only, so it fails "
                "its batches until it is upgraded (`zae-limiter upgrade`)",
            )
        recorded = record.get("aggregator_version")
        # None: no aggregator is recorded (a table made by `create_table`, as `local up` makes
        # it); this one runs anyway and has nothing to disagree with.
        if recorded not in (None, versioning.LIBRARY_VERSION, self._warned_version):
            self._warned_version = recorded
            log.warning(
                "aggregator code is zae-limiter %s but table %s records aggregator_version %s",
                versioning.LIBRARY_VERSION,
                self._store.table,
                recorded,
            )
        self._version_record = record
        self._version_checked_at = now
        return record

    # --- processing --------------------------------------------------------------------------

    async def handle_event(self, event: Mapping[str, Any]) -> dict[str, list[dict[str, str]]]:
        """A DynamoDB Streams Lambda event -> Lambda's partial batch response."""
        return (await self.process(list(event.get("Records") or []))).response()

    async def process(self, records: Sequence[Any]) -> BatchResult:
        """Apply a batch (the `Records` of a stream event). Raises only when the whole batch must
        be retried (version check, table unreachable before anything was read)."""
        await self.check_version()
        outcome = BatchResult(total=len(records))
        pending: list[_Pending] = []
        watched: list[tuple[int, StreamRecord]] = []  # bucket records with alert thresholds
        expired_audit: list[tuple[int, StreamRecord, dict[str, Any]]] = []
        first_of: dict[str, int] = {}
        repeats: dict[int, int] = {}
        for position, raw in enumerate(records):
            outcome.sequence_numbers[position] = stream_records.sequence_of(raw)
            try:
                record = stream_records.parse_record(raw)
                if record.event_id in first_of:
                    repeats[position] = first_of[record.event_id]
                    continue
                first_of[record.event_id] = position
                change = usage_records.bucket_change(record)
                if asks_for_alerts(record):  # threshold alerts (docs/alerts.md)
                    watched.append((position, record))
                if change is not None:
                    counts = usage_records.snapshot_counts(change, self.settings.windows)
                    pending.append(_Pending(position, record, change, counts))
                elif self._archive is not None and usage_records.is_audit_expiry(record):
                    expired_audit.append((position, record, usage_records.audit_line(record)))
                else:
                    outcome.ignored += 1
            except MalformedRecord as exc:
                outcome.failures[position] = exc
            except Exception as exc:  # one record this code cannot read never stops the others
                event_id = stream_records.event_id_of(raw)
                outcome.failures[position] = MalformedRecord(
                    f"record {event_id}: cannot be applied: {type(exc).__name__}: {exc}"
                )
        applied = await self._apply(pending, outcome)
        await self.held.batch(watched, outcome)  # a redelivery publishes what is unpublished
        await self._archive_batch(expired_audit, outcome)
        for position, first in repeats.items():
            if first in outcome.failures:
                outcome.failures[position] = outcome.failures[first]
        for position, failure in sorted(outcome.failures.items()):
            log.warning(
                "stream record %s (sequence %s%s) failed and will be retried: %s",
                stream_records.event_id_of(records[position]),
                outcome.sequence_numbers.get(position),
                await self._where(records[position]),
                failure,
            )
        names = {ns: await self._namespace_name(ns) for ns in {p.change.ns for p in applied}}
        outcome.metrics = metric_points([p.change for p in applied], names, self._clock())
        return outcome

    async def _where(self, raw: Any) -> str:
        """`, item <entity>/<resource> of namespace 'name' (id)` for a bucket record's log line."""
        bucket = stream_records.bucket_of(raw)
        if bucket is None:
            return ""
        ns, entity_id, resource, shard = bucket
        await self._namespace_name(ns)
        return (
            f", item {entity_id}/{resource} shard {shard} of namespace {namespace_labels.label(ns)}"
        )

    # --- snapshots ---------------------------------------------------------------------------

    async def _apply(self, pending: list[_Pending], outcome: BatchResult) -> list[_Pending]:
        applied: list[_Pending] = []
        for chunk in _chunks(pending):
            applied += await self._apply_chunk(chunk, outcome)
        return applied

    async def _apply_chunk(self, chunk: list[_Pending], outcome: BatchResult) -> list[_Pending]:
        """Apply the chunk in one transaction; returns the records applied by this call.

        Records whose marker exists are dropped (already applied) without using up an attempt.
        Throttling, contention and unknown outcomes are sent again (the markers make a resend
        safe); any other error halves the chunk until the failing record is alone.
        """
        remaining = list(chunk)
        failed_attempts = 0
        while True:
            try:
                if self._store.sequential:  # no transactions on this table (MRSC)
                    applied, duplicates, ignored = await self._one_at_a_time.apply(
                        remaining, self._clock() // 1000 + self.settings.marker_ttl_hours * 3600
                    )
                    outcome.duplicates += duplicates
                    outcome.ignored += ignored
                    outcome.applied += len(applied)
                    return [p for p in remaining if p in applied]
                await self._store.transact(self._operations(remaining))
            except TransactionCancelled as cancelled:
                codes = [str(reason.get("Code")) for reason in cancelled.reasons]
                done = {
                    i
                    for i, code in enumerate(codes[: len(remaining)])
                    if code == "ConditionalCheckFailed"
                }
                entities = _entities(remaining)
                deleted = [
                    entities[i]
                    for i, code in enumerate(codes[len(remaining) :])
                    if i < len(entities) and code == "ConditionalCheckFailed"
                ]
                if done or deleted:
                    outcome.duplicates += len(done)
                    remaining = [p for i, p in enumerate(remaining) if i not in done]
                    remaining = await self._drop_deleted(remaining, deleted, outcome)
                    if not remaining:
                        return []
                    continue
                error: BaseException = cancelled
                retry = any(code in _TRANSIENT_REASONS for code in codes)
            except (UnknownOutcome, DynamoUnavailable) as unsure:
                error, retry = unsure, True
            except (AccessDenied, TableMissing) as fatal:
                error = fatal
                break  # no record could succeed: fail them all
            except Exception as other:
                error, retry = other, False
            else:
                outcome.applied += len(remaining)
                return remaining
            if not retry:
                if len(remaining) > 1:
                    half = len(remaining) // 2
                    first = await self._apply_chunk(remaining[:half], outcome)
                    return first + await self._apply_chunk(remaining[half:], outcome)
                break
            failed_attempts += 1
            if failed_attempts >= ATTEMPTS:
                break
            delay = 0.05 * 2**failed_attempts * random.random()
            await asyncio.sleep(transport.backoff_scale * delay)
        for p in remaining:
            outcome.failures[p.position] = error
        return []

    async def _drop_deleted(
        self, remaining: list[_Pending], deleted: list[tuple[str, str]], outcome: BatchResult
    ) -> list[_Pending]:
        """Drop the records of writes made before their entity was deleted."""
        if not deleted:
            return remaining
        cutoff: dict[tuple[str, str], int] = {}
        for ns, entity_id in deleted:
            item = await self._store.get(keys.usage_tombstone(ns, entity_id), consistent=True)
            if item is not None:
                cutoff[(ns, entity_id)] = int(item["deleted_ms"])
        kept = [
            p
            for p in remaining
            if p.change.event_ms > cutoff.get((p.change.ns, p.change.entity_id), -1)
        ]
        outcome.ignored += len(remaining) - len(kept)
        return kept

    def _operations(self, chunk: list[_Pending]) -> list[dict[str, Any]]:
        now_s = self._clock() // 1000
        marker_ttl = now_s + self.settings.marker_ttl_hours * 3600
        operations: list[dict[str, Any]] = [
            {
                "Put": {
                    "Item": {
                        **keys.aggregation_marker(p.record.event_id),
                        "seq": p.record.sequence_number,
                        "ttl": marker_ttl,
                    },
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            }
            for p in chunk
        ]
        oldest: dict[tuple[str, str], int] = {}
        for p in chunk:
            entity = (p.change.ns, p.change.entity_id)
            oldest[entity] = min(oldest.get(entity, p.change.event_ms), p.change.event_ms)
        operations += [
            {
                "ConditionCheck": {
                    "Key": keys.usage_tombstone(*entity),
                    "ConditionExpression": "attribute_not_exists(PK) OR deleted_ms < :t",
                    "ExpressionAttributeValues": {":t": oldest[entity]},
                }
            }
            for entity in _entities(chunk)
        ]
        merged: dict[SnapshotKey, Counts] = {}
        for p in chunk:
            for key, counts in p.snapshots.items():
                merged.setdefault(key, Counts()).add(counts)
        for key in sorted(merged):
            if merged[key].empty:
                continue  # e.g. a debit and its refund: no snapshot for what debited nothing
            operations.append(
                snapshot_items.update_operation(key, merged[key], self._snapshot_ttl(key))
            )
        return operations

    def _snapshot_ttl(self, key: SnapshotKey) -> int:
        """When a snapshot expires (epoch seconds): its window's end plus its retention."""
        _, end_ms = bounds(key.start_ms, key.window_type)
        return end_ms // 1000 + self._retention_days(key.window_type) * 86400

    def _retention_days(self, window_type: str) -> int:
        per_window = self.settings.retention_days
        if chosen := per_window.get(window_type) or self.settings.default_retention_days:
            return chosen
        stored = (self._version_record or {}).get("usage_retention_days")
        return int(stored) if stored else DEFAULT_RETENTION_DAYS

    # --- audit archive -----------------------------------------------------------------------

    async def _archive_batch(
        self, expired: list[tuple[int, StreamRecord, dict[str, Any]]], outcome: BatchResult
    ) -> None:
        if not expired or self._archive is None:
            return
        key, body = usage_records.archive_object(
            [record for _, record, _ in expired], [line for _, _, line in expired], self._clock()
        )
        try:
            await self._archive(key, body)
        except Exception as exc:
            for position, _, _ in expired:
                outcome.failures[position] = exc
            return
        outcome.archived += len(expired)

    # --- metrics -----------------------------------------------------------------------------

    async def _namespace_name(self, ns: str) -> str:
        if ns not in self._namespace_names:
            try:
                item = await self._store.get(keys.namespace_by_id(ns), consistent=False)
            except Exception:
                return ns  # metrics only: fall back to the id, try again next batch
            self._namespace_names[ns] = str(item["name"]) if item and item.get("name") else ns
            if item and item.get("name"):
                namespace_labels.seen(ns, str(item["name"]))
        return self._namespace_names[ns]


def _entities(chunk: Sequence[_Pending]) -> list[tuple[str, str]]:
    """The distinct (namespace, entity) of a chunk's changes, in order: one check each."""
    return list(dict.fromkeys((p.change.ns, p.change.entity_id) for p in chunk))


def _chunks(pending: list[_Pending]) -> list[list[_Pending]]:
    """Group records so each transaction holds at most 100 items (markers, entity checks and
    distinct snapshots)."""
    chunks: list[list[_Pending]] = []
    current: list[_Pending] = []
    touched: set[SnapshotKey] = set()
    entities: set[tuple[str, str]] = set()
    for p in pending:
        new = set(p.snapshots) - touched
        entity = {(p.change.ns, p.change.entity_id)} - entities
        size = len(current) + 1 + len(entities) + len(entity) + len(touched) + len(new)
        if current and size > MAX_TRANSACTION_ITEMS:
            chunks.append(current)
            current, touched, entities = [], set(), set()
        current.append(p)
        touched |= set(p.snapshots)
        entities.add((p.change.ns, p.change.entity_id))
    if current:
        chunks.append(current)
    return chunks
