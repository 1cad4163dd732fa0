"""What the aggregator counts: stream records -> per-snapshot changes and audit archive lines. Pure.

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

import base64
import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import audit
from ..dynamo import codec, keys
from ..dynamo.snapshot_items import Counts, SnapshotKey
from ..schema import PARTITION_KEY, SORT_KEY
from . import windows

ARCHIVE_PREFIX = "audit"
TTL_PRINCIPAL = "dynamodb.amazonaws.com"


class MalformedRecord(ValueError):
    """A stream record the aggregator cannot read; reported as that record's failure."""


@dataclass(frozen=True)
class StreamRecord:
    """The parts of one DynamoDB stream record (Lambda event shape) the aggregator reads."""

    event_id: str
    event_name: str
    sequence_number: str
    pk: str
    sk: str
    old_wire: Mapping[str, Any] | None
    new_wire: Mapping[str, Any] | None
    created_s: float | None
    ttl_removal: bool

    def image(self, which: str) -> dict[str, Any] | None:
        """The old or new image in plain form; MalformedRecord if it cannot be decoded."""
        wire = self.old_wire if which == "old" else self.new_wire
        if wire is None:
            return None
        try:
            return codec.decode_item(dict(wire))
        except (TypeError, ValueError, AttributeError) as exc:
            raise MalformedRecord(
                f"record {self.event_id}: undecodable {which} image: {exc}"
            ) from exc


def parse_record(raw: Any) -> StreamRecord:
    """One `Records[i]` of a DynamoDB Streams Lambda event -> StreamRecord."""
    if not isinstance(raw, Mapping):
        raise MalformedRecord(f"a stream record must be an object, not {type(raw).__name__}")
    body = raw.get("dynamodb")
    event_id, event_name = raw.get("eventID"), raw.get("eventName")
    if not isinstance(body, Mapping) or not isinstance(event_id, str) or not event_id:
        raise MalformedRecord("a stream record needs eventID and dynamodb")
    if event_name not in ("INSERT", "MODIFY", "REMOVE"):
        raise MalformedRecord(f"record {event_id}: unknown eventName {event_name!r}")
    sequence = body.get("SequenceNumber")
    if not isinstance(sequence, str) or not sequence:
        raise MalformedRecord(f"record {event_id}: no SequenceNumber")
    try:
        pk = codec.decode(body["Keys"][PARTITION_KEY])
        sk = codec.decode(body["Keys"][SORT_KEY])
    except (KeyError, TypeError, ValueError, AttributeError):
        raise MalformedRecord(
            f"record {event_id}: Keys must hold string {PARTITION_KEY}/{SORT_KEY}"
        ) from None
    if not isinstance(pk, str) or not isinstance(sk, str):
        raise MalformedRecord(f"record {event_id}: keys must be strings")
    old, new = body.get("OldImage"), body.get("NewImage")
    for image in (old, new):
        if image is not None and not isinstance(image, Mapping):
            raise MalformedRecord(f"record {event_id}: images must be objects")
    created = body.get("ApproximateCreationDateTime")
    identity = raw.get("userIdentity")
    ttl_removal = (
        isinstance(identity, Mapping)
        and identity.get("type") == "Service"
        and identity.get("principalId") == TTL_PRINCIPAL
    )
    return StreamRecord(
        event_id=event_id,
        event_name=event_name,
        sequence_number=sequence,
        pk=pk,
        sk=sk,
        old_wire=old,
        new_wire=new,
        created_s=float(created) if isinstance(created, int | float) else None,
        ttl_removal=ttl_removal,
    )


def sequence_of(raw: Any) -> str | None:
    """A raw record's sequence number, if it has a readable one."""
    try:
        sequence = raw["dynamodb"]["SequenceNumber"]
    except (KeyError, TypeError):
        return None
    return sequence if isinstance(sequence, str) else None


def event_id_of(raw: Any) -> str | None:
    """A raw record's `eventID`, if it has one."""
    return raw.get("eventID") if isinstance(raw, Mapping) else None


def bucket_of(raw: Any) -> tuple[str, str, str, int] | None:
    """(namespace id, entity, resource, shard) of a raw bucket record, if its key says so."""
    try:
        return keys.parse_bucket_partition(raw["dynamodb"]["Keys"][PARTITION_KEY]["S"])
    except (KeyError, TypeError, ValueError):
        return None


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
    limits = item.get("L", {})
    if not isinstance(limits, dict):
        raise MalformedRecord(f"record {event_id}: bucket attribute L must be a map")
    consumed: dict[str, int] = {}
    overdrawn: dict[str, int] = {}
    for name, raw in limits.items():
        if not isinstance(raw, dict):
            raise MalformedRecord(f"record {event_id}: limit {name!r} must be a map")
        consumed[name] = _integer(raw.get("t", 0), f"L.{name}.t", event_id)
        overdrawn[name] = _integer(raw.get("o", 0), f"L.{name}.o", event_id)
    return _Counters(
        generation=str(item.get("g", "")),
        admissions=_integer(item.get("n", 0), "n", event_id),
        consumed=consumed,
        overdrawn=overdrawn,
    )


def is_bucket(record: StreamRecord) -> bool:
    return keys.is_bucket({PARTITION_KEY: record.pk, SORT_KEY: record.sk})


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
    event_ms = _integer(new.get("ts"), "ts", record.event_id)
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
    parent = new.get("par") if new.get("cas") else None
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


def _jsonable(value: Any) -> Any:
    """A botocore value as Lambda's JSON event carries it (binary as base64, times as seconds)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, datetime):
        return int(value.timestamp())
    return value


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """One GetRecords record -> one `Records[i]` of a DynamoDB Streams Lambda event."""
    out = {k: _jsonable(v) for k, v in record.items()}
    out["eventSourceARN"] = stream_arn
    return out
