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
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiobotocore.session import get_session

from zae_limiter.aggregator import Aggregator, AggregatorConfig, ArchiveSink
from zae_limiter.dynamo import transport
from zae_limiter.local.engine import LOCAL_ACCESS_KEY_ID, LOCAL_REGION, LOCAL_SECRET_ACCESS_KEY
from zae_limiter.stream_records import lambda_record

if TYPE_CHECKING:
    from zae_limiter.repository import Repository

log = logging.getLogger("zae_limiter.local.stream_runner")

#: Appears in the background process's command line; `local down` checks it before signalling.
PROCESS_MARKER = "zae_limiter.local.stream_runner"
DEFAULT_BATCH_SIZE = 100
DEFAULT_POLL_INTERVAL = 0.25
MAX_BACKOFF_S = 10.0


class AggregationFailed(Exception):
    """Records kept failing; they stay pending and are delivered again on the next drain."""


@dataclass
class _Shard:
    shard_id: str
    parent_id: str | None
    iterator: str | None = None
    last_sequence: str | None = None
    pending: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False

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
        self.caught_up_at_ms: int | None = None

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
                self.table, region=self.region, endpoint_url=self.endpoint_url,
                config=self.config, clock=self._clock, archive=self._archive,
            )
            stack.push_async_callback(self._aggregator.close)
            described = await self._aggregator.store.describe_table()
            arn = described.get("LatestStreamArn")
            if not arn:
                raise ValueError(f"table {self.table!r} has no stream")
            self.stream_arn = str(arn)
        except BaseException:
            await stack.aclose()
            raise
        self._exit = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._exit is not None:
            await self._exit.aclose()
            self._exit = None

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
            if records:
                shard.last_sequence = records[-1]["dynamodb"]["SequenceNumber"]
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
            if not failed:
                delivered += len(shard.pending)
                self.delivered += len(shard.pending)
                shard.pending = []
                return delivered
            sequences = [r["dynamodb"]["SequenceNumber"] for r in shard.pending]
            first = min((i for i, s in enumerate(sequences) if s in failed), default=0)
            delivered += first  # Lambda resumes at the first failed record
            self.delivered += first
            shard.pending = shard.pending[first:]
        raise AggregationFailed(
            f"{len(shard.pending)} record(s) of shard {shard.shard_id} still fail after "
            f"{self.max_attempts} attempts (first: {shard.pending[0].get('eventID')}); "
            "they stay pending"
        )

    async def drain(self) -> int:
        """Process every record written so far. Returns how many records were delivered.

        Raises AggregationFailed if records keep failing (they stay pending), and whatever the
        aggregator raises for a whole batch (a foreign schema, an unreachable table).
        """
        total = 0
        while True:
            await self._refresh_shards()
            progressed = False
            for shard in self._ready():
                if not shard.pending:
                    shard.pending = await self._fetch(shard)
                if shard.pending:
                    total += await self._deliver(shard)
                    progressed = True
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
        """Drain repeatedly until `stop` is set; failures are logged and retried, never skipped."""
        failures = 0
        while not stop.is_set():
            error: str | None = None
            try:
                await self.drain()
                failures = 0
            except Exception as exc:
                failures += 1
                error = f"{type(exc).__name__}: {exc}"
                log.error("aggregation paused (attempt %d), retrying: %s", failures, error)
            if status_path is not None:
                self._write_status(status_path, error, failures)
            delay = poll_interval if not failures else min(MAX_BACKOFF_S, 0.5 * 2**failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    def _write_status(self, path: Path, error: str | None, failures: int) -> None:
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
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status))
        tmp.replace(path)


# --- background process for `zae-limiter local up` ---------------------------------------------


@dataclass(frozen=True)
class AggregatorProcess:
    """The detached aggregator process: record it with `add_process("aggregator", ...)`."""

    pid: int
    marker: str
    log_path: Path | None
    status_path: Path | None


def aggregator_command(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    status_path: Path | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> list[str]:
    command = [
        sys.executable, "-m", PROCESS_MARKER, "--table", table, "--endpoint-url", endpoint_url,
        "--region", region, "--poll-interval", str(poll_interval),
    ]
    if status_path is not None:
        command += ["--status-file", str(status_path)]
    return command


def start_aggregator_process(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    log_path: str | os.PathLike[str] | None = None,
    status_path: str | os.PathLike[str] | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> AggregatorProcess:
    """Start the local aggregator in the background (it outlives the caller); returns its pid."""
    log_file = Path(log_path) if log_path is not None else None
    status_file = Path(status_path) if status_path is not None else None
    env = dict(os.environ)
    if not env.get("AWS_ACCESS_KEY_ID") or not env.get("AWS_SECRET_ACCESS_KEY"):
        env |= {"AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY}
    command = aggregator_command(
        table=table, endpoint_url=endpoint_url, region=region, status_path=status_file,
        poll_interval=poll_interval,
    )
    with contextlib.ExitStack() as stack:
        output: Any = subprocess.DEVNULL
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            output = stack.enter_context(log_file.open("ab"))
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=env,
            start_new_session=True, close_fds=True,
        )
    return AggregatorProcess(process.pid, PROCESS_MARKER, log_file, status_file)


def read_status(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the background aggregator last reported, with `lag_ms` (0 when caught up)."""
    try:
        status: dict[str, Any] = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    caught_up = status.get("caught_up_at_ms")
    if not status.get("consecutive_failures") and not status.get("pending"):
        status["lag_ms"] = 0
    elif caught_up is not None:
        status["lag_ms"] = max(0, int(status.get("updated_at_ms") or 0) - int(caught_up))
    else:
        status["lag_ms"] = None
    return status


async def run_aggregator(
    *,
    table: str,
    endpoint_url: str,
    region: str = LOCAL_REGION,
    stop: asyncio.Event,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
    status_path: Path | None = None,
) -> None:
    """Run the local aggregator until `stop` is set, waiting for the engine and table to exist."""
    failures = 0
    while not stop.is_set():
        try:
            async with StreamRunner(table, endpoint_url, region=region) as runner:
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
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        log.info("aggregating %s at %s", args.table, args.endpoint_url)
        await run_aggregator(
            table=args.table, endpoint_url=args.endpoint_url, region=args.region, stop=stop,
            poll_interval=args.poll_interval, status_path=args.status_file,
        )

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
