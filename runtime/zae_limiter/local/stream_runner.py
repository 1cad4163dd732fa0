"""The aggregator against DynamoDB Local's stream: what `zae-limiter local up` and the tests run.

`StreamRunner` polls every shard of the table's stream (DescribeStream, GetShardIterator,
GetRecords), turns each GetRecords page into the event Lambda would deliver (`Records` in the
Lambda shape, at most `batch_size` per event, one shard per event, in order) and hands it to the
same `Aggregator` the Lambda uses. It behaves like Lambda's event source mapping with partial
batch responses: after a failure it redelivers from the first failed record and never moves past
it, so nothing is dropped. A parent shard is finished before its children.

In-process (tests, docs)::

    async with StreamRunner.from_repository(repo) as runner:
        await runner.drain()   # everything written so far is now in the snapshots

In the background (`local up`): `start_aggregator_process(table=..., endpoint_url=...)` starts
`python -m zae_limiter.local.stream_runner` detached and returns its pid and command-line marker,
for `zae_limiter.local.add_process("aggregator", ...)`; `read_status(path)` reads what it reports.

Restarts: with a checkpoint file the runner records, per shard, the last sequence number the
aggregator acknowledged, and a new runner resumes after it instead of replaying the stream (a
replay would change nothing, but reads every record again). A stop request is honoured at once:
`drain(stop)` returns before the next batch, and `run(stop)` (SIGTERM in the background process)
also abandons the batch in flight, whose records are not acknowledged and so are delivered again
next time (the aggregator's markers keep that exactly once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiobotocore.session import get_session

from zae_limiter.aggregation import lambda_record
from zae_limiter.aggregator import Aggregator, AggregatorConfig, ArchiveSink
from zae_limiter.dynamo import transport
from zae_limiter.local.engine import LOCAL_ACCESS_KEY_ID, LOCAL_REGION, LOCAL_SECRET_ACCESS_KEY

if TYPE_CHECKING:
    from zae_limiter.repository import Repository

log = logging.getLogger("zae_limiter.local.stream_runner")

#: Appears in the background process's command line; `local down` checks it before signalling.
PROCESS_MARKER = "zae_limiter.local.stream_runner"
DEFAULT_BATCH_SIZE = 100
DEFAULT_POLL_INTERVAL = 0.25
MAX_BACKOFF_S = 10.0
#: A status report older than this (ms) is not trusted to say "caught up".
STALE_REPORT_MS = 2_000


class AggregationFailed(Exception):
    """Records kept failing; they stay pending and are delivered again on the next drain."""


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
        config: AggregatorConfig | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_attempts: int = 3,
        archive: ArchiveSink | None = None,
        clock: Callable[[], int] | None = None,
        checkpoint_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.table = table
        self.endpoint_url = endpoint_url
        self.region = region
        self.config = config or AggregatorConfig.from_env()
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
                config=self.config,
                clock=self._clock,
                archive=self._archive,
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
        """Hand the shard's pending records to the aggregator until all are acknowledged."""
        delivered = 0
        for attempt in range(self.max_attempts):
            if attempt:
                await asyncio.sleep(transport.backoff_scale * min(MAX_BACKOFF_S, 0.1 * 2**attempt))
            response = await self.aggregator.handle_event({"Records": shard.pending})
            failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
            sequences = [r["dynamodb"]["SequenceNumber"] for r in shard.pending]
            if not failed:
                delivered += len(shard.pending)
                self.delivered += len(shard.pending)
                shard.pending, shard.acked = [], sequences[-1]
                self._checkpoint()
                return delivered
            first = min((i for i, s in enumerate(sequences) if s in failed), default=0)
            delivered += first  # Lambda resumes at the first failed record
            self.delivered += first
            if first:
                shard.acked = sequences[first - 1]
                self._checkpoint()
            shard.pending = shard.pending[first:]
        raise AggregationFailed(
            f"{len(shard.pending)} record(s) of shard {shard.shard_id} still fail after "
            f"{self.max_attempts} attempts (first: {shard.pending[0].get('eventID')}); "
            "they stay pending"
        )

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
                    self._report()
            if not progressed:
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


# --- background process for `zae-limiter local up` ---------------------------------------------


@dataclass(frozen=True)
class AggregatorProcess:
    """The detached aggregator process: record it with `add_process("aggregator", ...)`."""

    pid: int
    marker: str
    log_path: Path | None
    status_path: Path | None
    checkpoint_path: Path | None = None


def aggregator_command(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    status_path: Path | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    checkpoint_path: Path | None = None,
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        PROCESS_MARKER,
        "--table",
        table,
        "--endpoint-url",
        endpoint_url,
        "--region",
        region,
        "--poll-interval",
        str(poll_interval),
    ]
    if status_path is not None:
        command += ["--status-file", str(status_path)]
    if checkpoint_path is not None:
        command += ["--checkpoint-file", str(checkpoint_path)]
    return command


def start_aggregator_process(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    log_path: str | os.PathLike[str] | None = None,
    status_path: str | os.PathLike[str] | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    checkpoint_path: str | os.PathLike[str] | None = None,
) -> AggregatorProcess:
    """Start the local aggregator in the background (it outlives the caller); returns its pid.

    With `checkpoint_path` it resumes where the last process with that file stopped.
    """
    log_file = Path(log_path) if log_path is not None else None
    status_file = Path(status_path) if status_path is not None else None
    checkpoint = Path(checkpoint_path) if checkpoint_path is not None else None
    env = dict(os.environ)
    if not env.get("AWS_ACCESS_KEY_ID") or not env.get("AWS_SECRET_ACCESS_KEY"):
        env |= {
            "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY,
        }
    command = aggregator_command(
        table=table,
        endpoint_url=endpoint_url,
        region=region,
        status_path=status_file,
        poll_interval=poll_interval,
        checkpoint_path=checkpoint,
    )
    with contextlib.ExitStack() as stack:
        output: Any = subprocess.DEVNULL
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            output = stack.enter_context(log_file.open("ab"))
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    return AggregatorProcess(process.pid, PROCESS_MARKER, log_file, status_file, checkpoint)


def read_status(
    path: str | os.PathLike[str], *, pid: int | None = None, now_ms: int | None = None
) -> dict[str, Any] | None:
    """What the background aggregator last reported, with `lag_ms` (0 when caught up).

    With `pid`, a report written by another process (a stopped predecessor) is no report: None.
    Lag is measured to now from the last time it was caught up; a report older than
    `STALE_REPORT_MS` never says 0 (the process may be stuck in a long batch).
    """
    try:
        status: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if pid is not None and status.get("pid") != pid:
        return None
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    caught_up = status.get("caught_up_at_ms")
    fresh = now - int(status.get("updated_at_ms") or 0) <= STALE_REPORT_MS
    idle = not status.get("consecutive_failures") and not status.get("pending")
    if fresh and idle and not status.get("draining"):
        status["lag_ms"] = 0
    elif caught_up is not None:
        status["lag_ms"] = max(0, now - int(caught_up))
    else:
        status["lag_ms"] = None
    return status


def mark_stopping(path: Path) -> None:
    """Say in the status file that this process is stopping (so `local up` starts another)."""
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        status = {"pid": os.getpid()}
    status["stopping"] = True
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status))
    tmp.replace(path)


async def run_aggregator(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    stop: asyncio.Event,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    status_path: Path | None = None,
    checkpoint_path: Path | None = None,
) -> None:
    """Run the local aggregator until `stop` is set, waiting for the engine and table to exist."""
    failures = 0
    while not stop.is_set():
        try:
            async with StreamRunner(
                table, endpoint_url, region=region, checkpoint_path=checkpoint_path
            ) as runner:
                failures = 0
                await runner.run(stop, poll_interval=poll_interval, status_path=status_path)
        except Exception as exc:
            failures += 1
            log.error("cannot read the stream of %s at %s yet: %s", table, endpoint_url, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(MAX_BACKOFF_S, 0.5 * 2**failures))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m zae_limiter.local.stream_runner --table T --endpoint-url URL`."""
    parser = argparse.ArgumentParser(
        prog=PROCESS_MARKER, description="The zae-limiter aggregator on DynamoDB Local's stream."
    )
    parser.add_argument("--table", required=True)
    parser.add_argument("--endpoint-url", required=True)
    parser.add_argument("--region", default=LOCAL_REGION)
    parser.add_argument("--poll-interval", type=float, default=DEFAULT_POLL_INTERVAL)
    parser.add_argument("--status-file", type=Path)
    parser.add_argument("--checkpoint-file", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stopping() -> None:
            stop.set()
            if args.status_file is not None:
                mark_stopping(args.status_file)

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping)
        log.info("aggregating %s at %s", args.table, args.endpoint_url)
        await run_aggregator(
            table=args.table,
            endpoint_url=args.endpoint_url,
            region=args.region,
            stop=stop,
            poll_interval=args.poll_interval,
            status_path=args.status_file,
            checkpoint_path=args.checkpoint_file,
        )

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
