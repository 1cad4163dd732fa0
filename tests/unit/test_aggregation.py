"""The aggregator's pure parts: stream records -> counter changes, windows, snapshot items, archive.

Bucket images are built with the library's own `bucket_items.full_item`, so they have exactly the
attributes the limiter writes.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from zae_limiter import Limit, ValidationError
from zae_limiter.audit import event_item
from zae_limiter.config import to_params
from zae_limiter.core.bucket import State
from zae_limiter.core.images import Stamp
from zae_limiter.core.times import from_iso_seconds, iso_seconds
from zae_limiter.dynamo import bucket_items, codec, keys
from zae_limiter.dynamo.stream_records import MalformedRecord, parse_record
from zae_limiter.usage import snapshot_items
from zae_limiter.usage.aggregator import AggregatorSettings, BatchResult, _chunks, _Pending
from zae_limiter.usage.records import (
    archive_object,
    audit_line,
    bucket_change,
    is_audit_expiry,
    snapshot_counts,
)
from zae_limiter.usage.snapshot_items import Counts, SnapshotKey
from zae_limiter.usage.windows import bounds, query_time, window_type

NS = "a1b2c3d4e5"
T0 = 1_767_608_100_000  # 2026-01-05T10:15:00Z
RPM = to_params(Limit.per_minute("rpm", 100))
TPM = to_params(Limit.per_minute("tpm", 10_000))
WEEKLY = to_params(Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True))


def bucket(
    *,
    consumed: dict[str, int],
    overdrawn: dict[str, int] | None = None,
    admissions: int,
    generation: str = "g1",
    ts: int = T0,
    limits: tuple[Any, ...] = (RPM, TPM),
    entity: str = "user-1",
    resource: str = "search",
) -> dict[str, Any]:
    """A bucket item (plain form) with the given counters (milli)."""
    stamp = Stamp(limits=limits)
    states = {
        p.name: State(
            v=0, consumed=consumed.get(p.name, 0), overdrawn=(overdrawn or {}).get(p.name, 0)
        )
        for p in limits
    }
    return bucket_items.full_item(
        NS,
        entity,
        resource,
        0,
        stamp,
        1,
        states,
        admissions=admissions,
        generation=generation,
        now=ts,
        ttl=None,
        evidence={"writer01": 1},
    )


def record(
    name: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    *,
    seq: str = "000000000000000000001",
    event_id: str = "ev-1",
    identity: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Lambda stream record in wire form."""
    item = new or old
    assert item is not None
    body: dict[str, Any] = {
        "Keys": codec.encode_item({"PK": item["PK"], "SK": item["SK"]}),
        "SequenceNumber": seq,
        "ApproximateCreationDateTime": T0 // 1000,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if old is not None:
        body["OldImage"] = codec.encode_item(old)
    if new is not None:
        body["NewImage"] = codec.encode_item(new)
    raw: dict[str, Any] = {"eventID": event_id, "eventName": name, "dynamodb": body}
    if identity is not None:
        raw["userIdentity"] = identity
    return raw


def change_of(raw: dict[str, Any]) -> Any:
    return bucket_change(parse_record(raw))


# --- counter changes -------------------------------------------------------------------------


def test_first_use_counts_everything_in_the_new_image() -> None:
    change = change_of(
        record("INSERT", None, bucket(consumed={"rpm": 1000, "tpm": 100_000}, admissions=1))
    )
    assert (change.ns, change.entity_id, change.resource, change.event_ms) == (
        NS,
        "user-1",
        "search",
        T0,
    )
    assert change.counts == Counts(consumed={"rpm": 1000, "tpm": 100_000}, events=1)


def test_modify_counts_new_minus_old() -> None:
    old = bucket(consumed={"rpm": 1000, "tpm": 100_000}, admissions=1)
    adjust = bucket(consumed={"rpm": 1000, "tpm": 150_000}, admissions=1, ts=T0 + 5)
    assert change_of(record("MODIFY", old, adjust)).counts == Counts(consumed={"tpm": 50_000})
    refund = bucket(consumed={"rpm": 0, "tpm": 50_000}, admissions=0, ts=T0 + 9)
    counts = change_of(record("MODIFY", adjust, refund)).counts
    assert counts == Counts(consumed={"rpm": -1000, "tpm": -100_000}, events=-1)


def test_event_time_is_the_writes_own_ts() -> None:
    old = bucket(consumed={"rpm": 1000}, admissions=1, ts=T0)
    new = bucket(consumed={"rpm": 2000}, admissions=2, ts=T0 + 3_600_000)
    assert change_of(record("MODIFY", old, new)).event_ms == T0 + 3_600_000


def test_restamp_nets_to_zero_even_when_limits_are_added_or_removed() -> None:
    old = bucket(consumed={"rpm": 4000, "tpm": 90_000}, admissions=4)
    restamped = bucket(consumed={"rpm": 4000}, admissions=4, limits=(RPM, WEEKLY), ts=T0 + 7)
    assert change_of(record("MODIFY", old, restamped)) is None


def test_recreated_item_counts_from_zero() -> None:
    expired = bucket(consumed={"rpm": 9000}, admissions=9, generation="old")
    recreated = bucket(consumed={"rpm": 1000}, admissions=1, generation="new", ts=T0 + 99)
    counts = change_of(record("MODIFY", expired, recreated)).counts
    assert counts == Counts(consumed={"rpm": 1000}, events=1)


def test_bypass_count_only_and_soft_overdraw_are_counted() -> None:
    old = bucket(consumed={"weekly": 0}, admissions=0, limits=(WEEKLY,), resource="budget")
    new = bucket(
        consumed={"weekly": 9_000_000_000},
        overdrawn={"weekly": 1},
        admissions=1,
        limits=(WEEKLY,),
        resource="budget",
    )
    counts = change_of(record("MODIFY", old, new)).counts
    assert counts == Counts(consumed={"weekly": 9_000_000_000}, overdrawn={"weekly": 1}, events=1)


def test_removal_and_other_items_count_nothing() -> None:
    item = bucket(consumed={"rpm": 5000}, admissions=5)
    assert change_of(record("REMOVE", item, None)) is None
    wire = record("INSERT", None, {"PK": f"{NS}#R#search", "SK": "#CFG"})
    wire["dynamodb"]["NewImage"]["payload"] = {"B": "AAE="}  # unreadable for us: never decoded
    assert change_of(wire) is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r["dynamodb"]["NewImage"].update(ts={"S": "soon"}), "ts must be an integer"),
        (lambda r: r["dynamodb"]["NewImage"].pop("ts"), "ts must be an integer"),
        (lambda r: r["dynamodb"].pop("OldImage"), "MODIFY without OldImage"),
        (
            lambda r: r["dynamodb"]["NewImage"]["L"]["M"]["rpm"]["M"].update(t={"N": "1.5"}),
            "L.rpm.t must be an integer",
        ),
        (lambda r: r["dynamodb"]["NewImage"].update(n={"X": "1"}), "undecodable new image"),
        (lambda r: r["dynamodb"]["Keys"].update(PK={"S": f"{NS}#B#only-entity"}), "not enough"),
    ],
)
def test_malformed_bucket_records(mutate: Any, message: str) -> None:
    raw = record(
        "MODIFY",
        bucket(consumed={"rpm": 1000}, admissions=1),
        bucket(consumed={"rpm": 2000}, admissions=2),
    )
    mutate(raw)
    with pytest.raises(MalformedRecord, match=message):
        change_of(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "not a record",
        {"eventName": "INSERT", "dynamodb": {}},
        {"eventID": "e", "eventName": "UPSERT", "dynamodb": {}},
        {"eventID": "e", "eventName": "INSERT", "dynamodb": {"Keys": {}}},
        {
            "eventID": "e",
            "eventName": "INSERT",
            "dynamodb": {"SequenceNumber": "1", "Keys": {"PK": {"N": "1"}, "SK": {"S": "x"}}},
        },
    ],
)
def test_malformed_envelopes(raw: Any) -> None:
    with pytest.raises(MalformedRecord):
        parse_record(raw)


# --- windows -------------------------------------------------------------------------------------


def ms(text: str) -> int:
    return from_iso_seconds(text)


@pytest.mark.parametrize(
    ("at", "kind", "start", "end"),
    [
        ("2026-01-05T10:59:59Z", "hourly", "2026-01-05T10:00:00Z", "2026-01-05T11:00:00Z"),
        ("2026-01-05T11:00:00Z", "hourly", "2026-01-05T11:00:00Z", "2026-01-05T12:00:00Z"),
        ("2026-01-05T23:59:59Z", "daily", "2026-01-05T00:00:00Z", "2026-01-06T00:00:00Z"),
        ("2026-02-28T12:00:00Z", "monthly", "2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
        ("2026-12-31T23:00:00Z", "monthly", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"),
    ],
)
def test_window_bounds(at: str, kind: str, start: str, end: str) -> None:
    assert tuple(iso_seconds(x) for x in bounds(ms(at), kind)) == (start, end)


def test_query_times() -> None:
    assert query_time(datetime(2026, 1, 5, 14), "t") == "2026-01-05T14:00:00Z"
    plus2 = timezone(timedelta(hours=2))
    assert query_time(datetime(2026, 1, 5, 16, tzinfo=plus2), "t") == "2026-01-05T14:00:00Z"
    assert query_time("2026-01-05T14:00:00Z", "t") == "2026-01-05T14:00:00Z"
    assert query_time("2026-01-05", "t") == "2026-01-05T00:00:00Z"
    assert query_time("2026-01-05T14:00:00.25+00:00", "t") == "2026-01-05T14:00:01Z"
    assert query_time(None, "t") is None
    for bad in ("yesterday", 1767571200, datetime(2026, 1, 5).date()):
        with pytest.raises(ValidationError):
            query_time(bad, "start_time")
    assert window_type("monthly") == "monthly"
    with pytest.raises(ValidationError):
        window_type("weekly")


def test_snapshot_counts_one_per_window() -> None:
    change = change_of(record("INSERT", None, bucket(consumed={"rpm": 1000}, admissions=1)))
    out = snapshot_counts(change, ("hourly", "daily", "monthly"))
    assert sorted((k.window_type, k.window_start) for k in out) == [
        ("daily", "2026-01-05T00:00:00Z"),
        ("hourly", "2026-01-05T10:00:00Z"),
        ("monthly", "2026-01-01T00:00:00Z"),
    ]
    assert all(c == Counts(consumed={"rpm": 1000}, events=1) for c in out.values())


# --- snapshot items ------------------------------------------------------------------------------


def test_snapshot_update_and_parse_round_trip() -> None:
    key = SnapshotKey(NS, "user-1", "search", "hourly", ms("2026-01-05T10:00:00Z"))
    op = snapshot_items.update_operation(
        key, Counts(consumed={"rpm": 2500}, overdrawn={"rpm": 1}, events=2), ttl_s=123
    )["Update"]
    assert op["Key"] == keys.usage_snapshot(
        NS, "user-1", "search", "hourly", "2026-01-05T10:00:00Z"
    )
    assert set(op["ExpressionAttributeNames"].values()) >= {
        "resource",
        "ttl",
        "GSI2PK",
        "GSI2SK",
        "GSI4PK",
        "GSI4SK",
        "c:rpm",
        "o:rpm",
        "total_events",
    }
    # what the update leaves in a new item
    stored: dict[str, Any] = dict(op["Key"])
    for alias, name in op["ExpressionAttributeNames"].items():
        stored[name] = op["ExpressionAttributeValues"][":" + alias[1:]]
    parsed = snapshot_items.parse(stored)
    assert parsed.snapshot.counters == {"rpm": 2}  # whole units, floor
    assert parsed.consumed_milli == {"rpm": 2500}
    assert (parsed.snapshot.window_end, parsed.snapshot.overdrawn) == (
        "2026-01-05T11:00:00Z",
        {"rpm": 1},
    )
    assert stored["GSI2SK"] == "hourly#2026-01-05T10:00:00Z#user-1"
    assert parsed.expired(124_000) and not parsed.expired(122_999)


def test_chunks_never_exceed_a_transaction() -> None:
    pending = []
    for i in range(120):
        change = change_of(
            record(
                "INSERT",
                None,
                bucket(consumed={"rpm": 1000}, admissions=1, entity=f"user-{i % 40}"),
            )
        )
        parsed = parse_record(record("INSERT", None, bucket(consumed={"rpm": 1}, admissions=1)))
        pending.append(
            _Pending(
                i,
                replace(parsed, event_id=f"e{i}"),
                change,
                snapshot_counts(change, ("hourly", "daily")),
            )
        )
    chunks = _chunks(pending)
    assert [p.position for chunk in chunks for p in chunk] == list(range(120))
    for chunk in chunks:
        touched = {k for p in chunk for k in p.snapshots}
        assert len(chunk) + len(touched) <= 100


def test_outcome_reports_failures_in_batch_order() -> None:
    outcome = BatchResult(total=3, sequence_numbers={0: "5", 1: "6", 2: None})
    outcome.failures = {2: ValueError("x"), 1: ValueError("y")}
    assert outcome.response() == {
        "batchItemFailures": [{"itemIdentifier": "6"}, {"itemIdentifier": ""}]
    }


def test_settings_from_env() -> None:
    settings = AggregatorSettings.from_env(
        {
            "SNAPSHOT_WINDOWS": "hourly, daily,monthly",
            "USAGE_RETENTION_DAYS": "30",
            "USAGE_RETENTION_DAYS_MONTHLY": "400",
            "AGGREGATOR_MARKER_TTL_HOURS": "48",
        }
    )
    assert settings.windows == ("hourly", "daily", "monthly")
    assert (settings.default_retention_days, dict(settings.retention_days)) == (
        30,
        {"monthly": 400},
    )
    assert settings.marker_ttl_hours == 48
    assert AggregatorSettings.from_env({}).windows == ("hourly", "daily")
    for bad in ({"SNAPSHOT_WINDOWS": "weekly"}, {"USAGE_RETENTION_DAYS": "-1"}):
        with pytest.raises(ValueError):
            AggregatorSettings.from_env(bad)


# --- audit archive -------------------------------------------------------------------------------


def audit_item() -> dict[str, Any]:
    return event_item(
        NS,
        action="limits_set",
        entity_id="user-1",
        principal="me",
        resource="search",
        details={"limits": []},
        now_ms=T0,
    )


TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def test_only_ttl_removals_of_audit_events_are_archived() -> None:
    item = audit_item()
    assert is_audit_expiry(parse_record(record("REMOVE", item, None, identity=TTL_IDENTITY)))
    assert not is_audit_expiry(parse_record(record("REMOVE", item, None)))  # a delete, not TTL
    assert not is_audit_expiry(parse_record(record("INSERT", None, item)))
    bucket_removed = record(
        "REMOVE", bucket(consumed={}, admissions=0), None, identity=TTL_IDENTITY
    )
    assert not is_audit_expiry(parse_record(bucket_removed))


def test_archive_object_is_gzip_json_lines_under_a_date_prefix() -> None:
    first = parse_record(record("REMOVE", audit_item(), None, seq="0007", identity=TTL_IDENTITY))
    last = replace(first, sequence_number="0009")
    line = audit_line(first)
    assert line["namespace_id"] == NS and line["action"] == "limits_set"
    key, body = archive_object([first, last], [line, line], now_ms=0)
    assert key == "audit/year=2026/month=01/day=05/0007-0009.jsonl.gz"
    lines = gzip.decompress(body).decode().splitlines()
    assert [json.loads(x)["event_id"] for x in lines] == [line["event_id"]] * 2
    assert archive_object([first, last], [line, line], now_ms=0)[1] == body  # deterministic
