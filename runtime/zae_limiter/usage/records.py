"""What the aggregator counts: stream records (`dynamo.stream_records`) -> per-snapshot changes
and audit archive lines. Pure.

A bucket item carries running counters per generation (`g`): `L.<limit>.t` net consumption
(milli), `L.<limit>.o` writes that left a soft limit below zero, and `n` admissions net of
refunds. A stream record's contribution is new minus old, counted from zero when the item was
created or re-created (no old image, or a different generation). So a restamp (config change,
shard split) nets to zero, a refund cancels its debit, and expiry (REMOVE) counts nothing. The
change is keyed by the write's own time `ts` (event time), never by the stream's timestamp.

Only keys are decoded before a record is known to matter, so that unrelated items in the table
can never make a record fail.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import audit
from ..dynamo import bucket_attributes as attrs
from ..dynamo import keys
from ..dynamo.stream_records import MalformedRecord, StreamRecord, is_bucket
from . import windows
from .snapshot_items import Counts, SnapshotKey

ARCHIVE_PREFIX = "audit"


# --- bucket changes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketChange:
    """What one write did to one bucket item's counters, at its event time."""

    ns: str
    entity_id: str
    resource: str
    event_ms: int
    counts: Counts
    #: The cascade parent this write also debited (from the item's stamp), else None.
    parent: str | None = None


@dataclass(frozen=True)
class _Counters:
    generation: str
    admissions: int
    consumed: dict[str, int] = field(default_factory=dict)
    overdrawn: dict[str, int] = field(default_factory=dict)


def _integer(value: Any, what: str, event_id: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedRecord(f"record {event_id}: {what} must be an integer, not {value!r}")
    return value


def _counters(item: dict[str, Any], event_id: str) -> _Counters:
    limits = item.get(attrs.LIMITS, {})
    if not isinstance(limits, dict):
        raise MalformedRecord(f"record {event_id}: bucket attribute {attrs.LIMITS} must be a map")
    consumed: dict[str, int] = {}
    overdrawn: dict[str, int] = {}
    for name, raw in limits.items():
        if not isinstance(raw, dict):
            raise MalformedRecord(f"record {event_id}: limit {name!r} must be a map")
        where = f"{attrs.LIMITS}.{name}"
        consumed[name] = _integer(raw.get(attrs.CONSUMED, 0), f"{where}.t", event_id)
        overdrawn[name] = _integer(raw.get(attrs.OVERDRAWN, 0), f"{where}.o", event_id)
    return _Counters(
        generation=str(item.get(attrs.GENERATION, "")),
        admissions=_integer(item.get(attrs.ADMISSIONS, 0), attrs.ADMISSIONS, event_id),
        consumed=consumed,
        overdrawn=overdrawn,
    )


def bucket_change(record: StreamRecord) -> BucketChange | None:
    """The counter changes of a bucket record, or None when it counts nothing."""
    if not is_bucket(record) or record.event_name == "REMOVE":
        return None
    new = record.image("new")
    if new is None:
        raise MalformedRecord(f"record {record.event_id}: {record.event_name} without NewImage")
    try:
        ns, entity_id, resource, _ = keys.parse_bucket_partition(record.pk)
    except ValueError as exc:
        raise MalformedRecord(f"record {record.event_id}: {exc}") from None
    event_ms = _integer(new.get(attrs.WRITTEN_AT), attrs.WRITTEN_AT, record.event_id)
    after = _counters(new, record.event_id)
    old = record.image("old")
    if old is None and record.event_name == "MODIFY":
        raise MalformedRecord(f"record {record.event_id}: MODIFY without OldImage")
    before = _counters(old, record.event_id) if old is not None else None
    if before is None or before.generation != after.generation:
        before = _Counters(after.generation, 0)
    counts = Counts(events=after.admissions - before.admissions)
    # Limits only in the old image were removed by a restamp: their counts are not undone.
    for name, total in after.consumed.items():
        delta = total - before.consumed.get(name, 0)
        if delta:
            counts.consumed[name] = delta
    for name, total in after.overdrawn.items():
        delta = total - before.overdrawn.get(name, 0)
        if delta:
            counts.overdrawn[name] = delta
    if counts.empty:
        return None
    parent = new.get(attrs.PARENT) if new.get(attrs.CASCADE) else None
    return BucketChange(ns, entity_id, resource, event_ms, counts, str(parent) if parent else None)


def snapshot_counts(change: BucketChange, window_types: Iterable[str]) -> dict[SnapshotKey, Counts]:
    """The change, once per window type, keyed by the snapshot it belongs to.

    A cascading write also adds its consumption to the parent's snapshots as `cascaded`: the
    parent's own record counts the debit in its counters, and `cascaded` says how much of them
    came from children, so that a resource-wide total counts each debit once.
    """
    out: dict[SnapshotKey, Counts] = {}
    for window_type in window_types:
        start, _ = windows.bounds(change.event_ms, window_type)
        key = SnapshotKey(change.ns, change.entity_id, change.resource, window_type, start)
        counts = Counts()
        counts.add(change.counts)
        out[key] = counts
        if change.parent is not None and change.counts.consumed:
            parent = SnapshotKey(change.ns, change.parent, change.resource, window_type, start)
            out[parent] = Counts(cascaded=dict(change.counts.consumed))
    return out


# --- audit archive -------------------------------------------------------------------------------


def is_audit_expiry(record: StreamRecord) -> bool:
    """A namespaced audit event removed by TTL."""
    if record.event_name != "REMOVE" or not record.ttl_removal:
        return False
    ns, _, rest = record.pk.partition("#A#")
    return bool(rest) and bool(ns) and not ns.startswith(keys.RESERVED)


def audit_line(record: StreamRecord) -> dict[str, Any]:
    """The archived form of an expired audit event: its namespace id and AuditEvent fields."""
    old = record.image("old")
    if old is None:
        raise MalformedRecord(f"record {record.event_id}: audit removal without OldImage")
    try:
        event = audit.event_from_item(old)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecord(f"record {record.event_id}: unreadable audit event: {exc}") from None
    return {"namespace_id": record.pk.partition("#A#")[0], **event.to_dict()}


def archive_object(
    records: Sequence[StreamRecord], lines: Sequence[dict[str, Any]], now_ms: int
) -> tuple[str, bytes]:
    """(S3 key, gzip JSON lines) for one batch's expired audit events.

    Dated by the removal time of the first record (else `now_ms`) and named by the batch's
    sequence numbers, so a redelivered batch writes the same object again.
    """
    first = records[0]
    when = datetime.fromtimestamp(
        first.created_s if first.created_s is not None else now_ms / 1000, UTC
    )
    name = f"{first.sequence_number}-{records[-1].sequence_number}.jsonl.gz"
    key = f"{ARCHIVE_PREFIX}/year={when:%Y}/month={when:%m}/day={when:%d}/{name}"
    text = "".join(json.dumps(line, sort_keys=True, default=str) + "\n" for line in lines)
    return key, gzip.compress(text.encode(), mtime=0)
