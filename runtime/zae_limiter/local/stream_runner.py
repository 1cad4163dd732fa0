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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zae_limiter.alerts.sinks import jsonl_sink
from zae_limiter.local.engine import LOCAL_ACCESS_KEY_ID, LOCAL_REGION, LOCAL_SECRET_ACCESS_KEY
from zae_limiter.local.stream_poller import DEFAULT_BATCH_SIZE as DEFAULT_BATCH_SIZE
from zae_limiter.local.stream_poller import DEFAULT_POLL_INTERVAL as DEFAULT_POLL_INTERVAL
from zae_limiter.local.stream_poller import MAX_BACKOFF_S as MAX_BACKOFF_S
from zae_limiter.local.stream_poller import PROCESS_MARKER as PROCESS_MARKER
from zae_limiter.local.stream_poller import STALE_REPORT_MS as STALE_REPORT_MS
from zae_limiter.local.stream_poller import AggregationFailed as AggregationFailed
from zae_limiter.local.stream_poller import StreamRunner as StreamRunner

log = logging.getLogger("zae_limiter.local.stream_runner")


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
    alerts_log: Path | None = None,
    dead_letter_path: Path | None = None,
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
    if alerts_log is not None:
        command += ["--alerts-log", str(alerts_log)]
    if dead_letter_path is not None:
        command += ["--dead-letter-file", str(dead_letter_path)]
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
    alerts_log: str | os.PathLike[str] | None = None,
    dead_letter_path: str | os.PathLike[str] | None = None,
    settings: Mapping[str, str] | None = None,
) -> AggregatorProcess:
    """Start the local aggregator in the background (it outlives the caller); returns its pid.

    With `checkpoint_path` it resumes where the last process with that file stopped; with
    `alerts_log` it also appends each threshold alert to that file as a JSON line; with
    `dead_letter_path` a record that keeps failing is appended there with its reason and passed
    over (without one, it is retried until it applies and holds up its shard). `settings`: the
    aggregator's environment settings (`AggregatorSettings.from_env`, e.g. `ALERT_HOLD_SECONDS`)
    for this process only.
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
    env |= dict(settings or {})
    command = aggregator_command(
        table=table,
        endpoint_url=endpoint_url,
        region=region,
        status_path=status_file,
        poll_interval=poll_interval,
        checkpoint_path=checkpoint,
        alerts_log=Path(alerts_log) if alerts_log is not None else None,
        dead_letter_path=Path(dead_letter_path) if dead_letter_path is not None else None,
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
    alerts_log: Path | None = None,
    dead_letter_path: Path | None = None,
) -> None:
    """Run the local aggregator until `stop` is set, waiting for the engine and table to exist."""
    failures = 0
    sink = jsonl_sink(alerts_log, table) if alerts_log is not None else None
    while not stop.is_set():
        try:
            async with StreamRunner(
                table,
                endpoint_url,
                region=region,
                checkpoint_path=checkpoint_path,
                alerts=sink,
                dead_letter_path=dead_letter_path,
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
    parser.add_argument("--alerts-log", type=Path)
    parser.add_argument("--dead-letter-file", type=Path)
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
            alerts_log=args.alerts_log,
            dead_letter_path=args.dead_letter_file,
        )

    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
