"""`usage redrive` end to end: DynamoDB Local's stream, an SQS DLQ on moto, the real aggregator.

A DLQ message is what Lambda's event source mapping sends for a batch it gave up on: an
invocation record naming a stream range. Each test writes usage with the limiter (no aggregator
running, so the usage is missing from the snapshots, as after a dead-lettered batch), puts such a
record on the queue, redrives, and compares the snapshots with the bucket items' own counters.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiobotocore.session import get_session
from click.testing import CliRunner

from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.cli import cli
from zae_limiter.dynamo import codec, keys, transport
from zae_limiter.local.stream_runner import StreamRunner
from zae_limiter.usage.redrive import NoDeadLetterQueue, StreamRange, redrive

pytestmark = pytest.mark.ddb

#: The shape AWS documents for a DynamoDB stream batch's on-failure invocation record.
INVOCATION_RECORD: dict[str, Any] = {
    "requestContext": {
        "requestId": "316aa6d0-8154-xmpl-9af7-85d5f4a6bc81",
        "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:aggregator",
        "condition": "RetryAttemptsExhausted",
        "approximateInvokeCount": 4,
    },
    "responseContext": {
        "statusCode": 200,
        "executedVersion": "$LATEST",
        "functionError": "Unhandled",
    },
    "version": "1.0",
    "timestamp": "2026-11-30T00:13:49.717Z",
}


def invocation_record(stream_arn: str, shard_id: str, first: str, last: str, size: int) -> str:
    return json.dumps(
        {
            **INVOCATION_RECORD,
            "DDBStreamBatchInfo": {
                "shardId": shard_id,
                "startSequenceNumber": first,
                "endSequenceNumber": last,
                "approximateArrivalOfFirstRecord": "2026-11-30T00:13:19Z",
                "approximateArrivalOfLastRecord": "2026-11-30T00:13:19Z",
                "batchSize": size,
                "streamArn": stream_arn,
            },
        }
    )


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


@pytest.fixture
async def sqs(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Any]:
    """An SQS client on moto; the library finds moto through AWS_ENDPOINT_URL_SQS."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", moto_endpoint)
    async with get_session().create_client(
        "sqs", region_name="us-east-1", endpoint_url=moto_endpoint
    ) as client:
        yield client


@pytest.fixture
async def dlq(sqs: Any, table: TableRef, ddb_client: Any) -> str:
    """A fresh queue, named in the table's version record as the aggregator's DLQ."""
    url = str((await sqs.create_queue(QueueName=f"dlq-{uuid.uuid4().hex[:12]}"))["QueueUrl"])
    await ddb_client.update_item(
        TableName=table.name,
        Key=codec.encode_item(keys.version_record()),
        UpdateExpression="SET aggregator_dlq_url = :url",
        ExpressionAttributeValues={":url": {"S": url}},
    )
    return url


@pytest.fixture
async def repo(table: TableRef, dlq: str) -> AsyncIterator[Repository]:
    opened = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    yield opened
    await opened.close()


@pytest.fixture
async def streams(table: TableRef) -> AsyncIterator[Any]:
    async with get_session().create_client(
        "dynamodbstreams", region_name=table.region, endpoint_url=table.endpoint_url
    ) as client:
        yield client


async def write_usage(repo: Repository) -> RateLimiter:
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("rpm", 100), Limit.per_minute("tpm", 10_000)]
    )
    for tokens in (100, 40, 7):
        async with limiter.acquire("user-1", "search", consume={"rpm": 1, "tpm": tokens}):
            pass
    return limiter


async def stream_records(streams: Any, repo: Repository) -> tuple[str, str, list[str]]:
    """The table's stream ARN, its (only) shard, and that shard's sequence numbers so far."""
    described = await repo.transport.call("DescribeTable", {"TableName": repo.table_name})
    arn = described["Table"]["LatestStreamArn"]
    shards = (await streams.describe_stream(StreamArn=arn))["StreamDescription"]["Shards"]
    assert len(shards) == 1
    shard = shards[0]["ShardId"]
    iterator = (
        await streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
    )["ShardIterator"]
    sequences = [
        r["dynamodb"]["SequenceNumber"]
        for r in (await streams.get_records(ShardIterator=iterator))["Records"]
    ]
    return arn, shard, sequences


async def dead_letter_everything(sqs: Any, dlq: str, streams: Any, repo: Repository) -> int:
    arn, shard, sequences = await stream_records(streams, repo)
    await sqs.send_message(
        QueueUrl=dlq,
        MessageBody=invocation_record(arn, shard, sequences[0], sequences[-1], len(sequences)),
    )
    return len(sequences)


async def snapshot_counters(limiter: RateLimiter) -> dict[str, int]:
    snapshots, _ = await limiter.get_usage_snapshots(
        entity_id="user-1", resource="search", window_type="daily"
    )
    return snapshots[0].counters if snapshots else {}


async def ledger(repo: Repository) -> dict[str, int]:
    return {s.limit_name: s.total_consumed for s in await repo.get_buckets("user-1", "search")}


async def messages_left(sqs: Any, dlq: str) -> int:
    attributes = await sqs.get_queue_attributes(
        QueueUrl=dlq,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )
    return sum(int(v) for v in attributes["Attributes"].values())


async def test_a_dead_lettered_range_is_applied_once_and_deleted(
    repo: Repository, sqs: Any, dlq: str, streams: Any
) -> None:
    limiter = await write_usage(repo)
    assert await snapshot_counters(limiter) == {}  # the batch never reached the snapshots
    records = await dead_letter_everything(sqs, dlq, streams, repo)

    report = await redrive(repo)

    assert report.ok and [r.status for r in report.results] == ["applied"]
    assert report.records == records
    assert report.applied > 0
    assert await snapshot_counters(limiter) == await ledger(repo) == {"rpm": 3, "tpm": 147}
    assert await messages_left(sqs, dlq) == 0
    again = await redrive(repo)
    assert again.results == [] and again.ok


async def test_a_range_the_aggregator_had_applied_counts_once(
    repo: Repository, sqs: Any, dlq: str, streams: Any
) -> None:
    limiter = await write_usage(repo)
    async with StreamRunner.from_repository(repo) as runner:
        await runner.drain()
    before = await snapshot_counters(limiter)
    assert before == {"rpm": 3, "tpm": 147}
    await dead_letter_everything(sqs, dlq, streams, repo)

    report = await redrive(repo)

    assert [r.status for r in report.results] == ["applied"]
    assert report.applied == 0 and report.results[0].duplicates > 0
    assert await snapshot_counters(limiter) == before
    assert await messages_left(sqs, dlq) == 0


async def test_only_the_named_range_is_read_back(
    repo: Repository, sqs: Any, dlq: str, streams: Any
) -> None:
    await write_usage(repo)
    arn, shard, sequences = await stream_records(streams, repo)
    middle = sequences[1:-1]
    await sqs.send_message(
        QueueUrl=dlq, MessageBody=invocation_record(arn, shard, middle[0], middle[-1], len(middle))
    )

    report = await redrive(repo, dry_run=True)

    assert [(r.status, r.records) for r in report.results] == [("would apply", len(middle))]


async def test_a_dry_run_applies_and_deletes_nothing(
    repo: Repository, sqs: Any, dlq: str, streams: Any
) -> None:
    limiter = await write_usage(repo)
    records = await dead_letter_everything(sqs, dlq, streams, repo)

    report = await redrive(repo, dry_run=True)

    assert report.ok and [(r.status, r.records) for r in report.results] == [
        ("would apply", records)
    ]
    assert await snapshot_counters(limiter) == {}
    visible = await sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=0)
    assert len(visible.get("Messages", [])) == 1  # left in the queue, visible at once


async def test_ranges_that_cannot_be_redriven_are_kept_and_reported(
    repo: Repository, sqs: Any, dlq: str, streams: Any
) -> None:
    await write_usage(repo)
    arn, _, _ = await stream_records(streams, repo)
    await sqs.send_message(
        QueueUrl=dlq,
        MessageBody=invocation_record(
            arn, "shardId-00000001700000000000-deadbeef", "1" * 21, "2" * 21, 2
        ),
    )
    await sqs.send_message(QueueUrl=dlq, MessageBody='{"not": "an invocation record"}')

    report = await redrive(repo)

    assert sorted(r.status for r in report.results) == ["expired", "unreadable"]
    assert not report.ok
    expired = next(r for r in report.results if r.status == "expired")
    assert "24 h" in expired.detail
    assert await messages_left(sqs, dlq) == 2


async def test_a_table_without_a_dlq_says_so(table: TableRef) -> None:
    opened = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    try:
        with pytest.raises(NoDeadLetterQueue, match="cdk deploy"):
            await redrive(opened)
    finally:
        await opened.close()


async def test_the_command_line(
    repo: Repository, sqs: Any, dlq: str, streams: Any, table: TableRef
) -> None:
    limiter = await write_usage(repo)
    await dead_letter_everything(sqs, dlq, streams, repo)
    connect = [
        "--table",
        table.name,
        "--endpoint-url",
        table.endpoint_url,
        "--region",
        table.region,
    ]
    runner = CliRunner()

    dry = runner.invoke(cli, [*connect, "usage", "redrive", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would apply" in dry.stdout and "would re-apply" in dry.stdout

    done = runner.invoke(cli, [*connect, "usage", "redrive", "-o", "json"])
    assert done.exit_code == 0, done.output
    assert [r["status"] for r in json.loads(done.stdout)["results"]] == ["applied"]
    assert await snapshot_counters(limiter) == {"rpm": 3, "tpm": 147}

    await sqs.send_message(QueueUrl=dlq, MessageBody="{}")
    kept = runner.invoke(cli, [*connect, "usage", "redrive"])
    assert kept.exit_code == 1
    assert "unreadable" in kept.stdout and "left in the DLQ" in kept.stdout


def test_invocation_records_are_parsed() -> None:
    found = StreamRange.from_message(
        invocation_record(
            "arn:aws:dynamodb:us-east-1:1:table/t/stream/x",
            "shardId-1",
            "800000000003126276362",
            "800000000003126276399",
            3,
        )
    )
    assert found == StreamRange(
        "arn:aws:dynamodb:us-east-1:1:table/t/stream/x",
        "shardId-1",
        "800000000003126276362",
        "800000000003126276399",
        3,
    )
    assert found.holds("800000000003126276362") and found.holds("800000000003126276399")
    assert not found.holds("800000000003126276400") and found.past("800000000003126276400")
    for bad in (
        "",
        "[]",
        '{"DDBStreamBatchInfo": {}}',
        json.dumps(
            {
                "DDBStreamBatchInfo": {
                    "streamArn": "a",
                    "shardId": "s",
                    "startSequenceNumber": "1" * 21,
                    "endSequenceNumber": "2",
                }
            }
        ),
    ):
        with pytest.raises(ValueError):
            StreamRange.from_message(bad)
