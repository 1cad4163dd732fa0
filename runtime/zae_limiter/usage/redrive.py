"""`zae-limiter usage redrive`: re-apply the stream ranges the aggregator gave up on.

When a stream batch keeps failing, the aggregator's event source mapping sends an *invocation
record* to the DLQ: it names the range (stream, shard, first and last sequence number, size),
not the records. Redrive reads each range back from the stream while the stream still holds it
(24 h), hands the records to the same `Aggregator` the Lambda runs, and deletes the message once
every record applied. Applying is idempotent (a marker per stream `eventID`), so a range that was
partly applied before, or is redriven twice, counts each record once.

A message is kept in the queue (visible again when the run ends) when its range has left the
stream (`expired`: the snapshots miss those records for good; the message says which), when
records still fail (`failed`), when it is not a stream invocation record (`unreadable`), and with
`dry_run` (nothing is applied or deleted). While a run lasts, every message it received stays
hidden, so each is handled once per run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..dynamo.stream_records import lambda_record
from ..errors import ZAELimiterError
from .aggregator import Aggregator, AggregatorSettings

if TYPE_CHECKING:
    from ..repository import Repository

#: How long a received message stays hidden while the run lasts (kept ones are shown again at
#: its end; a run that dies shows them again after this).
VISIBILITY_TIMEOUT_S = 900
#: GetRecords pages in a row without a record before a range is declared unreadable.
MAX_EMPTY_PAGES = 10
PAGE_LIMIT = 1000

Status = Literal["applied", "would apply", "expired", "failed", "unreadable"]


class NoDeadLetterQueue(ZAELimiterError):
    """The table's version record names no DLQ (it was not deployed with `cdk deploy`)."""

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(
            f"table {table!r} records no aggregator DLQ: only a `cdk deploy` (ZaeLimiter "
            "construct) creates one. Locally, `zae-limiter local up` writes records that keep "
            "failing to aggregator-dead-letters.jsonl in its state directory "
            "(`zae-limiter local status` names it), with the reason of each."
        )


@dataclass(frozen=True)
class StreamRange:
    """The stream records one DLQ message stands for (Lambda's `DDBStreamBatchInfo`)."""

    stream_arn: str
    shard_id: str
    first: str
    last: str
    size: int

    @classmethod
    def from_message(cls, body: str) -> StreamRange:
        """Parse an invocation record; ValueError if it names no DynamoDB stream range."""
        try:
            info = json.loads(body)["DDBStreamBatchInfo"]
            found = cls(
                stream_arn=str(info["streamArn"]),
                shard_id=str(info["shardId"]),
                first=str(info["startSequenceNumber"]),
                last=str(info["endSequenceNumber"]),
                size=int(info.get("batchSize") or 0),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a DynamoDB stream invocation record: {exc}") from None
        for sequence in (found.first, found.last):
            if not (sequence.isdigit() and 21 <= len(sequence) <= 40):
                raise ValueError(f"not a stream sequence number (21-40 digits): {sequence!r}")
        return found

    def holds(self, sequence: str) -> bool:
        return int(self.first) <= int(sequence) <= int(self.last)

    def past(self, sequence: str) -> bool:
        return int(sequence) > int(self.last)


@dataclass
class RangeResult:
    """What redrive did with one DLQ message."""

    message_id: str
    range: StreamRange | None
    status: Status
    records: int = 0  # records read back from the stream
    applied: int = 0  # written now
    duplicates: int = 0  # applied before (by the aggregator or an earlier redrive)
    detail: str = ""


@dataclass
class RedriveReport:
    """Every message seen, and totals."""

    dry_run: bool
    results: list[RangeResult] = field(default_factory=list)

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.results)

    @property
    def applied(self) -> int:
        return sum(r.applied for r in self.results)

    @property
    def ok(self) -> bool:
        """Every message was redriven (or, in a dry run, could be)."""
        wanted: Status = "would apply" if self.dry_run else "applied"
        return all(r.status == wanted for r in self.results)


class _RangeGone(Exception):
    """The stream no longer holds (part of) the range."""


class Redrive:
    """Reads the DLQ, reads each range back from the stream, applies it with the aggregator."""

    def __init__(self, aggregator: Aggregator, streams: Any, sqs: Any, queue_url: str) -> None:
        self.aggregator = aggregator
        self.streams = streams
        self.sqs = sqs
        self.queue_url = queue_url

    async def run(self, *, dry_run: bool = False) -> RedriveReport:
        """Redrive every message in the queue; those not applied are visible again afterwards."""
        report = RedriveReport(dry_run=dry_run)
        kept: list[str] = []  # receipt handles of messages left in the queue
        try:
            async for message in self._messages():
                result = await self._redrive(message, dry_run=dry_run)
                report.results.append(result)
                if result.status == "applied":
                    await self.sqs.delete_message(
                        QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                    )
                else:
                    kept.append(message["ReceiptHandle"])
        finally:
            for handle in kept:  # hidden while this run lasted, so none was read twice
                await self.sqs.change_message_visibility(
                    QueueUrl=self.queue_url, ReceiptHandle=handle, VisibilityTimeout=0
                )
        return report

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            page = await self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=VISIBILITY_TIMEOUT_S,
                WaitTimeSeconds=1,
            )
            messages = page.get("Messages") or []
            if not messages:
                return
            for message in messages:
                yield message

    async def _redrive(self, message: dict[str, Any], *, dry_run: bool) -> RangeResult:
        message_id = str(message["MessageId"])
        try:
            stream_range = StreamRange.from_message(str(message.get("Body", "")))
        except ValueError as exc:
            return RangeResult(message_id, None, "unreadable", detail=str(exc))
        try:
            records = await self._read(stream_range)
        except _RangeGone as exc:
            return RangeResult(message_id, stream_range, "expired", detail=str(exc))
        if dry_run:
            return RangeResult(message_id, stream_range, "would apply", records=len(records))
        outcome = await self.aggregator.process(records)
        result = RangeResult(
            message_id,
            stream_range,
            "applied",
            records=len(records),
            applied=outcome.applied,
            duplicates=outcome.duplicates,
        )
        if outcome.failures:
            position, error = min(outcome.failures.items())
            result.status = "failed"
            result.detail = (
                f"{len(outcome.failures)} record(s) still fail, first "
                f"{records[position].get('eventID')}: {error}"
            )
        return result

    async def _read(self, stream_range: StreamRange) -> list[dict[str, Any]]:
        """The range's records as Lambda records, read from the stream."""
        errors = self.streams.exceptions
        try:
            iterator = (
                await self.streams.get_shard_iterator(
                    StreamArn=stream_range.stream_arn,
                    ShardId=stream_range.shard_id,
                    ShardIteratorType="AT_SEQUENCE_NUMBER",
                    SequenceNumber=stream_range.first,
                )
            )["ShardIterator"]
        except (errors.TrimmedDataAccessException, errors.ResourceNotFoundException) as exc:
            raise _RangeGone(
                f"the stream no longer holds shard {stream_range.shard_id} from sequence "
                f"{stream_range.first} (past its 24 h retention): {exc}"
            ) from None
        records: list[dict[str, Any]] = []
        empty_pages = 0
        while iterator and empty_pages < MAX_EMPTY_PAGES:
            try:
                page = await self.streams.get_records(ShardIterator=iterator, Limit=PAGE_LIMIT)
            except errors.TrimmedDataAccessException as exc:
                raise _RangeGone(f"the range left the stream while being read: {exc}") from None
            iterator = page.get("NextShardIterator")
            found = page.get("Records") or []
            empty_pages = 0 if found else empty_pages + 1
            for record in found:
                sequence = str(record["dynamodb"]["SequenceNumber"])
                if stream_range.past(sequence):
                    return records
                if stream_range.holds(sequence):
                    records.append(lambda_record(record, stream_range.stream_arn))
            if records and stream_range.size and len(records) >= stream_range.size:
                return records
        if not records:
            raise _RangeGone(
                f"no record of shard {stream_range.shard_id} between sequences "
                f"{stream_range.first} and {stream_range.last} is left in the stream"
            )
        return records


async def redrive(repo: Repository, *, dry_run: bool = False) -> RedriveReport:
    """Redrive the DLQ the table's version record names (see the module docstring)."""
    from aiobotocore.session import get_session

    record = await repo.get_version_record() or {}
    queue_url = record.get("aggregator_dlq_url")
    if not queue_url:
        raise NoDeadLetterQueue(repo.table_name)
    session = get_session()
    async with AsyncExitStack() as stack:
        streams = await stack.enter_async_context(
            session.create_client(
                "dynamodbstreams", region_name=repo.region, endpoint_url=repo.endpoint_url
            )
        )
        sqs = await stack.enter_async_context(session.create_client("sqs", region_name=repo.region))
        aggregator = await Aggregator.connect(
            repo.table_name,
            region=repo.region,
            endpoint_url=repo.endpoint_url,
            settings=AggregatorSettings.from_env(),
        )
        stack.push_async_callback(aggregator.close)
        return await Redrive(aggregator, streams, sqs, str(queue_url)).run(dry_run=dry_run)
