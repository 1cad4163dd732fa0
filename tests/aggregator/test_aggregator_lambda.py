"""The aggregator Lambda handler on DynamoDB Local, fed a recorded DynamoDB Local stream event.

`tests/fixtures/aggregator/ddblocal_stream_event.json` was recorded by `record_event.py` next to
it (its docstring gives the ledger: user-1 on `search`, rpm 1, tpm 150, 1 admission, at
2026-01-05T10:15Z). The handler runs in a worker thread, as Lambda runs it: synchronously, with
its own event loop. S3 (the audit archive) is moto's server.
"""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from support.aggregator_lambda import invoke, loaded_handler
from support.clock import FakeClock
from support.fixtures import REGION
from support.tables import TableRef
from zae_limiter import IncompatibleSchemaError, RateLimiter, Repository
from zae_limiter.dynamo import codec, keys

pytestmark = pytest.mark.ddb

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "fixtures" / "aggregator" / "ddblocal_stream_event.json"
TTL_IDENTITY = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


@pytest.fixture(scope="module")
def handler() -> Iterator[ModuleType]:
    yield from loaded_handler()


@pytest.fixture
async def repo(
    table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Repository]:
    """The table's repository at the recording's time (its snapshots are not yet expired)."""
    monkeypatch.setenv("TABLE_NAME", table.name)
    opened = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    yield opened
    await opened.close()


def recorded_event(namespace_id: str) -> dict[str, Any]:
    """The recorded event, moved into this table's namespace."""
    recorded = json.loads(RECORDING.read_text())
    text = json.dumps(recorded["event"]).replace(recorded["namespace_id"], namespace_id)
    event: dict[str, Any] = json.loads(text)
    return event


def emf_blobs(printed: str) -> list[dict[str, Any]]:
    blobs = []
    for line in printed.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blobs.append(json.loads(line))
    return blobs


async def recorded_ledger_holds(repo: Repository) -> None:
    limiter = RateLimiter(repo)
    windows = (("hourly", "2026-01-05T10:00:00Z"), ("daily", "2026-01-05T00:00:00Z"))
    for window_type, start in windows:
        snapshots, _ = await limiter.get_usage_snapshots(
            entity_id="user-1", resource="search", window_type=window_type
        )
        assert [(s.window_start, s.counters, s.total_events) for s in snapshots] == [
            (start, {"rpm": 1, "tpm": 150}, 1)
        ]


async def test_recorded_event_applies_and_a_malformed_record_fails_alone(
    handler: ModuleType,
    repo: Repository,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = recorded_event(repo.namespace_id)
    buckets = [r for r in event["Records"] if r["dynamodb"]["Keys"]["SK"]["S"] == keys.BUCKET]
    assert [r["eventName"] for r in buckets] == ["INSERT", "MODIFY", "MODIFY", "MODIFY"]
    malformed = copy.deepcopy(buckets[-1])
    malformed["eventID"] = "malformed-1"
    malformed["dynamodb"]["SequenceNumber"] = "000000000000000000099"
    malformed["dynamodb"]["NewImage"]["ts"] = {"S": "yesterday"}
    event["Records"].insert(6, malformed)  # among the good ones

    response = await invoke(handler, event)

    assert response == {"batchItemFailures": [{"itemIdentifier": "000000000000000000099"}]}
    await recorded_ledger_holds(repo)
    blobs = emf_blobs(capsys.readouterr().out)
    dimension_sets = {
        tuple(sorted(names))
        for blob in blobs
        for d in blob["_aws"]["CloudWatchMetrics"]
        for names in d["Dimensions"]
    }
    assert dimension_sets <= {
        ("deployment", "limit", "namespace", "resource"),
        ("deployment", "namespace", "resource"),
        ("deployment", "service"),
    }
    assert {b["deployment"] for b in blobs} == {repo.table_name}
    consumed = {
        (b["namespace"], b["resource"], b["limit"]): b["Consumed"] for b in blobs if "Consumed" in b
    }
    assert consumed == {("default", "search", "rpm"): [1.0], ("default", "search", "tpm"): [150.0]}
    assert [b["Admissions"] for b in blobs if "Admissions" in b] == [[1.0]]
    assert any("ProcessingLagMs" in b for b in blobs)
    messages = [r.getMessage() for r in caplog.records]
    assert not any("aggregator_version" in m for m in messages)  # none recorded: nothing to say
    [summary] = [r for r in caplog.records if r.getMessage() == "batch processed"]
    counts = [getattr(summary, name) for name in ("applied", "failed", "ignored")]
    assert counts == [4, 1, 5]


async def test_poisoned_records_between_good_ones_fail_alone(
    handler: ModuleType,
    repo: Repository,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What DynamoDB Local's stream sends is decoded (an empty map arrives as `{}`); a record
    that cannot be applied for any reason, not only a malformed one, is reported alone (Lambda
    retries it, then sends it to the DLQ) and every record around it applies."""
    event = recorded_event(repo.namespace_id)
    buckets = [r for r in event["Records"] if r["dynamodb"]["Keys"]["SK"]["S"] == keys.BUCKET]
    for record in buckets:  # holds and hold ledgers of a concurrency limit, as the local engine
        for image in ("OldImage", "NewImage"):
            if image in record["dynamodb"]:
                limits = record["dynamodb"][image]["L"]["M"]
                limits["rpm"]["M"] |= {"h": {}, "he": {}}
    poisoned = copy.deepcopy(buckets[1])
    poisoned["eventID"] = "poisoned-1"
    poisoned["dynamodb"]["SequenceNumber"] = "000000000000000000098"
    event["Records"].insert(event["Records"].index(buckets[1]) + 1, poisoned)
    from zae_limiter.usage import records as usage_records

    change_of = usage_records.bucket_change

    def unforeseen(record: Any) -> Any:
        if record.event_id == "poisoned-1":
            raise RuntimeError("a shape nobody foresaw")
        return change_of(record)

    monkeypatch.setattr(usage_records, "bucket_change", unforeseen)
    response = await invoke(handler, event)
    assert response == {"batchItemFailures": [{"itemIdentifier": "000000000000000000098"}]}
    await recorded_ledger_holds(repo)
    [failed] = [r.getMessage() for r in caplog.records if "poisoned-1" in r.getMessage()]
    where = f"item user-1/search shard 0 of namespace 'default' ({repo.namespace_id})"
    assert where in failed and "a shape nobody foresaw" in failed


@pytest.mark.filterwarnings("error::aws_lambda_powertools.warnings.PowertoolsUserWarning")
async def test_a_process_that_served_another_table_tags_this_one_without_warning(
    handler: ModuleType, repo: Repository, capsys: pytest.CaptureFixture[str]
) -> None:
    """One Lambda process can serve a second table's stream (a redeployed function): its
    metrics carry the new table's name, and Powertools is never asked to overwrite one."""
    handler._serve("an-earlier-table")
    capsys.readouterr()
    await invoke(handler, recorded_event(repo.namespace_id))
    blobs = emf_blobs(capsys.readouterr().out)
    assert blobs and {b["deployment"] for b in blobs} == {repo.table_name}


async def test_a_redelivered_event_changes_nothing(handler: ModuleType, repo: Repository) -> None:
    event = recorded_event(repo.namespace_id)
    assert await invoke(handler, event) == {"batchItemFailures": []}
    assert await invoke(handler, event) == {"batchItemFailures": []}
    await recorded_ledger_holds(repo)


async def test_a_foreign_schema_fails_the_whole_batch(
    handler: ModuleType, repo: Repository
) -> None:
    await repo.set_version_record(schema_version="2.0.0")
    with pytest.raises(IncompatibleSchemaError, match="fails its batches"):
        await invoke(handler, recorded_event(repo.namespace_id))
    snapshots, _ = await RateLimiter(repo).get_usage_snapshots(entity_id="user-1")
    assert snapshots == []


# --- audit archive -------------------------------------------------------------------------------


@pytest.fixture
def archive(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_endpoint)
    monkeypatch.setenv("ARCHIVE_BUCKET", "zae-archive")
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name=REGION)
    s3.create_bucket(Bucket="zae-archive")
    return s3


async def audit_removals(repo: Repository, ddb_client: Any) -> list[dict[str, Any]]:
    """The stream records TTL would produce for the table's audit events, and one plain delete."""
    await RateLimiter(repo).create_entity(entity_id="user-1")
    await RateLimiter(repo).create_entity(entity_id="user-2")
    removals: list[dict[str, Any]] = []
    for seq, entity in enumerate(("user-1", "user-2"), start=1):
        partition = keys.audit_partition(repo.namespace_id, entity)
        page = await ddb_client.query(
            TableName=repo.table_name,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": partition}},
        )
        [item] = page["Items"]
        removals.append(
            {
                "eventID": f"remove-{seq}",
                "eventName": "REMOVE",
                "userIdentity": TTL_IDENTITY,
                "dynamodb": {
                    "ApproximateCreationDateTime": 1_767_608_100 + seq,
                    "Keys": {"PK": item["PK"], "SK": item["SK"]},
                    "OldImage": item,
                    "SequenceNumber": f"{seq:021d}",
                },
            }
        )
    deleted = copy.deepcopy(removals[0])
    del deleted["userIdentity"]  # deleted by someone, not expired: not archived
    deleted["eventID"], deleted["dynamodb"]["SequenceNumber"] = "delete-1", f"{3:021d}"
    return [*removals, deleted]


async def test_expired_audit_events_are_archived(
    handler: ModuleType, repo: Repository, ddb_client: Any, archive: Any
) -> None:
    removals = await audit_removals(repo, ddb_client)
    event = recorded_event(repo.namespace_id)
    event["Records"] += removals
    assert await invoke(handler, event) == {"batchItemFailures": []}
    listed = archive.list_objects_v2(Bucket="zae-archive", Prefix="audit/")
    [key] = [obj["Key"] for obj in listed.get("Contents", [])]
    assert key == (
        "audit/year=2026/month=01/day=05/000000000000000000001-000000000000000000002.jsonl.gz"
    )
    body = archive.get_object(Bucket="zae-archive", Key=key)["Body"].read()
    lines = [json.loads(line) for line in gzip.decompress(body).decode().splitlines()]
    assert [(x["entity_id"], x["action"], x["namespace_id"]) for x in lines] == [
        ("user-1", "entity_created", repo.namespace_id),
        ("user-2", "entity_created", repo.namespace_id),
    ]
    expected_ids = [codec.decode(r["dynamodb"]["OldImage"]["event_id"]) for r in removals[:2]]
    assert [x["event_id"] for x in lines] == expected_ids
    await recorded_ledger_holds(repo)


async def test_a_failed_archive_fails_only_the_audit_records(
    handler: ModuleType,
    repo: Repository,
    ddb_client: Any,
    archive: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ARCHIVE_BUCKET", "no-such-bucket")
    removals = await audit_removals(repo, ddb_client)
    event = recorded_event(repo.namespace_id)
    event["Records"] += removals
    response = await invoke(handler, event)
    assert response == {
        "batchItemFailures": [
            {"itemIdentifier": f"{1:021d}"},
            {"itemIdentifier": f"{2:021d}"},
        ]
    }
    await recorded_ledger_holds(repo)


async def test_the_held_alerts_schedule_sweeps_held_crossings(
    handler: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The construct's one-minute schedule (`HELD_ALERTS_EVENT`) runs the aggregator's sweep of
    held crossings instead of a batch, so a crossing whose hold passed is stored even when the
    stream brings nothing (the sweep itself: tests/aggregator/test_alerts.py)."""
    from zae_limiter.alerts.held import Swept
    from zae_limiter.cdk.aggregator import HELD_ALERTS_EVENT

    swept: list[str] = []

    class Held:
        async def sweep_now(self) -> Swept:
            swept.append("swept")
            return Swept(alerts_stored=2, alerts_published=1)

    class Aggregator:
        held = Held()

    async def get_aggregator(event: dict[str, Any]) -> Aggregator:
        return Aggregator()

    monkeypatch.setattr(handler, "_get_aggregator", get_aggregator)
    response = await invoke(handler, dict(HELD_ALERTS_EVENT))
    assert response == {"held_alerts": {"alerts_stored": 2, "alerts_published": 1}}
    assert swept == ["swept"]
