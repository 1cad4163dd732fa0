"""DynamoDB stream records as Lambda delivers them (`Records[i]` of a Streams event). Pure.

`parse_record` reads one: its keys, its old and new images in DynamoDB's wire form (decoded on
demand, `StreamRecord.image`) and whether TTL removed the item; a record that cannot be read is
`MalformedRecord`, which the aggregator reports as that record's failure. Only keys are decoded
before a record is known to matter, so that unrelated items in the table can never make a record
fail. `lambda_record` turns a GetRecords record into that event shape (redrive, `local up`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..schema import PARTITION_KEY, SORT_KEY
from . import codec, keys

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


def is_bucket(record: StreamRecord) -> bool:
    return keys.is_bucket({PARTITION_KEY: record.pk, SORT_KEY: record.sk})


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
