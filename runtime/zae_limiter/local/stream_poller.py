"""Polling DynamoDB Local's stream into the `Aggregator`: `StreamRunner` (see `stream_runner`).

`StreamRunner` polls every shard of the table's stream (DescribeStream, GetShardIterator,
GetRecords), turns each GetRecords page into the event Lambda would deliver and hands it to the
same `Aggregator` the Lambda uses, with Lambda's partial-batch redelivery; with a checkpoint file
it resumes after the last acknowledged record. `stream_runner` runs it as a background process.

A record that still fails after `max_attempts` deliveries is, with a dead-letter file, appended
to it as one JSON line (the record, its reason, when, the shard) and passed over, so the records
after it, of every namespace, are applied: what the Lambda's DLQ is on AWS. Without one the
runner stops at it (`AggregationFailed`), which is what tests of failures want.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiobotocore.session import get_session

from zae_limiter.alerts.recorder import AlertSink
from zae_limiter.core.times import iso_millis
from zae_limiter.dynamo import transport
from zae_limiter.dynamo.stream_records import lambda_record
from zae_limiter.local.engine import LOCAL_REGION
from zae_limiter.local.processes import AGGREGATOR_MARKER
from zae_limiter.usage.aggregator import Aggregator, AggregatorSettings, ArchiveSink
from zae_limiter.versioning import LIBRARY_VERSION

if TYPE_CHECKING:
    from zae_limiter.repository import Repository

log = logging.getLogger("zae_limiter.local.stream_runner")

#: Appears in the background process's command line; `local down` checks it before signalling.
PROCESS_MARKER = AGGREGATOR_MARKER
DEFAULT_BATCH_SIZE = 100
DEFAULT_POLL_INTERVAL = 0.25
MAX_BACKOFF_S = 10.0
#: A status report older than this (ms) is not trusted to say "caught up".
STALE_REPORT_MS = 2_000


class AggregationFailed(Exception):
    """Records kept failing (and no dead-letter file takes them); they stay pending and are
    delivered again on the next drain."""


@dataclass
class _Shard:
    shard_id: str
    parent_id: str | None
    iterator: str | None = None
    last_sequence: str | None = None  # the last record fetched
    pending: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    acked: str | None = None  # the last record the aggregator acknowledged

    @property
    def done(self) -> bool:
        return self.closed and not self.pending


class StreamRunner:
    """Feeds a table's stream to the aggregator. Use as `async with`; see the module docstring."""

    def __init__(
        self,
        table: str,
        endpoint_url: str,
        *,
        region: str = LOCAL_REGION,
        settings: AggregatorSettings | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_attempts: int = 3,
        archive: ArchiveSink | None = None,
        clock: Callable[[], int] | None = None,
        checkpoint_path: str | os.PathLike[str] | None = None,
        alerts: AlertSink | None = None,
        dead_letter_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.table = table
        self._alerts = alerts
        self.endpoint_url = endpoint_url
        self.region = region
        self.settings = settings or AggregatorSettings.from_env()
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self._archive = archive
        self._clock = clock
        self._exit: AsyncExitStack | None = None
        self._streams: Any = None
        self._aggregator: Aggregator | None = None
        self._shards: dict[str, _Shard] = {}
        self.stream_arn = ""
        self.delivered = 0  # records handed to the aggregator and acknowledged
        self.read = 0  # records read from the stream (a replay shows here)
        self.caught_up_at_ms: int | None = None
        self.checkpoint_path = Path(checkpoint_path) if checkpoint_path is not None else None
        self.dead_letter_path = Path(dead_letter_path) if dead_letter_path is not None else None
        self.dead_lettered = 0  # records passed over into the dead-letter file
        self._status_path: Path | None = None

    @classmethod
    def from_repository(cls, repo: Repository, **kwargs: Any) -> StreamRunner:
        """A runner for the repository's table and endpoint."""
        if repo.endpoint_url is None:
            raise ValueError("the stream runner is for a local endpoint; the repository has none")
        return cls(repo.table_name, repo.endpoint_url, region=repo.region, **kwargs)

    @property
    def aggregator(self) -> Aggregator:
        if self._aggregator is None:
            raise RuntimeError("use the runner inside `async with`")
        return self._aggregator

    async def __aenter__(self) -> StreamRunner:
        stack = AsyncExitStack()
        try:
            self._streams = await stack.enter_async_context(
                get_session().create_client(
                    "dynamodbstreams", region_name=self.region, endpoint_url=self.endpoint_url
                )
            )
            self._aggregator = await Aggregator.connect(
                self.table,
                region=self.region,
                endpoint_url=self.endpoint_url,
                settings=self.settings,
                clock=self._clock,
                archive=self._archive,
                alerts=self._alerts,
            )
            stack.push_async_callback(self._aggregator.close)
            described = await self._aggregator.store.describe_table()
            arn = described.get("LatestStreamArn")
            if not arn:
                raise ValueError(f"table {self.table!r} has no stream")
            self.stream_arn = str(arn)
            self._resume()
        except BaseException:
            await stack.aclose()
            raise
        self._exit = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._exit is not None:
            await self._exit.aclose()
            self._exit = None

    # --- checkpoint --------------------------------------------------------------------------

    def _resume(self) -> None:
        """Start each shard after the sequence a previous runner's checkpoint acknowledged."""
        if self.checkpoint_path is None:
            return
        try:
            saved = json.loads(self.checkpoint_path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(saved, dict) or saved.get("stream_arn") != self.stream_arn:
            return  # another table or a re-created stream: start from its beginning
        for shard_id, entry in (saved.get("shards") or {}).items():
            acked = entry.get("acked")
            self._shards[shard_id] = _Shard(
                shard_id,
                entry.get("parent"),
                last_sequence=acked,
                acked=acked,
                closed=bool(entry.get("done")),
            )

    def _checkpoint(self) -> None:
        if self.checkpoint_path is None:
            return
        shards = {
            s.shard_id: {"parent": s.parent_id, "acked": s.acked, "done": s.done}
            for s in self._shards.values()
            if s.acked is not None or s.done
        }
        tmp = self.checkpoint_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stream_arn": self.stream_arn, "shards": shards}))
        tmp.replace(self.checkpoint_path)

    # --- reading the stream ------------------------------------------------------------------

    async def _refresh_shards(self) -> None:
        start: str | None = None
        while True:
            request: dict[str, Any] = {"StreamArn": self.stream_arn}
            if start:
                request["ExclusiveStartShardId"] = start
            described = (await self._streams.describe_stream(**request))["StreamDescription"]
            for shard in described.get("Shards", []):
                if shard["ShardId"] not in self._shards:
                    self._shards[shard["ShardId"]] = _Shard(
                        shard["ShardId"], shard.get("ParentShardId")
                    )
            start = described.get("LastEvaluatedShardId")
            if not start:
                return

    def _ready(self) -> list[_Shard]:
        """Shards to read now: not finished, and whose parent (if we know it) is finished."""
        out = []
        for shard in self._shards.values():
            parent = self._shards.get(shard.parent_id or "")
            if not shard.done and (parent is None or parent.done):
                out.append(shard)
        return out

    async def _iterator(self, shard: _Shard) -> str:
        request = {"StreamArn": self.stream_arn, "ShardId": shard.shard_id}
        if shard.last_sequence:
            request |= {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "SequenceNumber": shard.last_sequence,
            }
        else:
            request["ShardIteratorType"] = "TRIM_HORIZON"
        return str((await self._streams.get_shard_iterator(**request))["ShardIterator"])

    async def _fetch(self, shard: _Shard) -> list[dict[str, Any]]:
        """The next page of the shard, as Lambda records; marks the shard closed at its end."""
        if shard.closed:
            return []
        errors = self._streams.exceptions
        for _ in range(3):
            if shard.iterator is None:
                shard.iterator = await self._iterator(shard)
            try:
                page = await self._streams.get_records(
                    ShardIterator=shard.iterator, Limit=self.batch_size
                )
            except errors.ExpiredIteratorException:
                shard.iterator = None
                continue
            except errors.TrimmedDataAccessException:
                shard.iterator, shard.last_sequence = None, None
                continue
            shard.iterator = page.get("NextShardIterator")
            shard.closed = shard.iterator is None
            records = [lambda_record(r, self.stream_arn) for r in page.get("Records", [])]
            self.read += len(records)
            if records:
                shard.last_sequence = records[-1]["dynamodb"]["SequenceNumber"]
            elif shard.closed:
                self._checkpoint()  # finished: a restart need not open it again
            return records
        raise AggregationFailed(f"shard {shard.shard_id}: could not get a valid iterator")

    async def poll(self) -> list[dict[str, Any]]:
        """Read the next page of every ready shard as Lambda events, without processing them.

        The records are consumed: a later `drain()` starts after them. For tests that feed
        events to the Lambda handler or the aggregator themselves.
        """
        await self._refresh_shards()
        events = []
        for shard in self._ready():
            records = await self._fetch(shard)
            if records:
                events.append({"Records": records})
        return events

    # --- delivering --------------------------------------------------------------------------

    async def _deliver(self, shard: _Shard) -> int:
        """Hand the shard's pending records to the aggregator until all are acknowledged (or,
        with a dead-letter file, passed over after `max_attempts` failed deliveries)."""
        delivered = 0
        attempts = 0  # failed deliveries of the first pending record
        while shard.pending:
            if attempts:
                await asyncio.sleep(transport.backoff_scale * min(MAX_BACKOFF_S, 0.1 * 2**attempts))
            outcome = await self.aggregator.process(shard.pending)
            first = min(outcome.failures, default=len(shard.pending))  # Lambda resumes there
            self._acknowledge(shard, first)
            delivered += first
            if not shard.pending:
                break
            attempts = attempts + 1 if first == 0 else 1
            if attempts < self.max_attempts:
                continue
            if self.dead_letter_path is None:
                raise AggregationFailed(
                    f"{len(shard.pending)} record(s) of shard {shard.shard_id} still fail after "
                    f"{self.max_attempts} attempts (first: {shard.pending[0].get('eventID')}: "
                    f"{outcome.failures[first]}); they stay pending"
                )
            self._dead_letter(shard, outcome.failures[first], attempts)
            attempts = 0
        return delivered

    def _acknowledge(self, shard: _Shard, count: int, *, applied: bool = True) -> None:
        """The first `count` pending records are done (applied, or passed over): the
        checkpoint moves past them."""
        if count:
            shard.acked = shard.pending[count - 1]["dynamodb"]["SequenceNumber"]
            shard.pending = shard.pending[count:]
            self.delivered += count if applied else 0
            self._checkpoint()

    def _dead_letter(self, shard: _Shard, reason: BaseException, attempts: int) -> None:
        """Append the first pending record to the dead-letter file with its reason; pass it."""
        assert self.dead_letter_path is not None
        record = shard.pending[0]
        line = {
            "dead_lettered_at": iso_millis(time.time_ns() // 1_000_000),
            "table": self.table,
            "stream_arn": self.stream_arn,
            "shard_id": shard.shard_id,
            "sequence_number": record["dynamodb"]["SequenceNumber"],
            "event_id": record.get("eventID"),
            "attempts": attempts,
            "reason": f"{type(reason).__name__}: {reason}",
            "record": record,
        }
        self.dead_letter_path.parent.mkdir(parents=True, exist_ok=True)
        with self.dead_letter_path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, sort_keys=True, default=str) + "\n")
        self.dead_lettered += 1
        log.error(
            "stream record %s (sequence %s) failed %d times and was passed over into %s: %s",
            line["event_id"],
            line["sequence_number"],
            attempts,
            self.dead_letter_path,
            line["reason"],
        )
        self._acknowledge(shard, 1, applied=False)

    async def drain(self, stop: asyncio.Event | None = None) -> int:
        """Process every record written so far. Returns how many records were delivered.

        With `stop`, returns as soon as it is set, after the batch in hand. Raises
        AggregationFailed if records keep failing (they stay pending), and whatever the
        aggregator raises for a whole batch (a foreign schema, an unreachable table).
        """
        total = 0
        while True:
            await self._refresh_shards()
            progressed = False
            for shard in self._ready():
                if stop is not None and stop.is_set():
                    return total
                if not shard.pending:
                    shard.pending = await self._fetch(shard)
                if shard.pending:
                    total += await self._deliver(shard)
                    progressed = True
                    if stop is None or not stop.is_set():  # a stopping process said so already
                        self._report()
            if not progressed:
                await self.aggregator.held.sweep_now()  # held crossings due on idle items
                self.caught_up_at_ms = time.time_ns() // 1_000_000
                return total

    async def run(
        self,
        stop: asyncio.Event,
        *,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        status_path: Path | None = None,
    ) -> None:
        """Drain repeatedly until `stop` is set; failures are logged and retried, never skipped.

        `stop` interrupts a batch in flight: its records are not acknowledged, so the next run
        delivers them again and the aggregator's markers apply each exactly once.
        """
        failures = 0
        self._status_path = status_path
        while not stop.is_set():
            error: str | None = None
            try:
                if not await _unless_stopped(self.drain(stop), stop):
                    return
                failures = 0
            except Exception as exc:
                failures += 1
                error = f"{type(exc).__name__}: {exc}"
                log.error("aggregation paused (attempt %d), retrying: %s", failures, error)
            if status_path is not None and not stop.is_set():
                self._write_status(status_path, error, failures)
            delay = poll_interval if not failures else min(MAX_BACKOFF_S, 0.5 * 2**failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def _report(self) -> None:
        """Progress inside a long drain: `local status` sees it is working, not caught up."""
        if self._status_path is not None:
            self._write_status(self._status_path, None, 0, draining=True)

    def _write_status(
        self, path: Path, error: str | None, failures: int, *, draining: bool = False
    ) -> None:
        status = {
            "pid": os.getpid(),
            "version": LIBRARY_VERSION,
            "table": self.table,
            "endpoint_url": self.endpoint_url,
            "records": self.delivered,
            "pending": sum(len(s.pending) for s in self._shards.values()),
            "caught_up_at_ms": self.caught_up_at_ms,
            "updated_at_ms": time.time_ns() // 1_000_000,
            "consecutive_failures": failures,
            "last_error": error,
            "draining": draining,
            "records_read": self.read,
            "dead_lettered": self.dead_lettered,
            "dead_letter_file": str(self.dead_letter_path) if self.dead_letter_path else None,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(path)


async def _unless_stopped(work: Coroutine[Any, Any, Any], stop: asyncio.Event) -> bool:
    """Run `work` to its end (True), or cancel it as soon as `stop` is set (False)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()
    return True
