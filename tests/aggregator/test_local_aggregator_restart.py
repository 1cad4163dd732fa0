"""The local aggregator resumes from its checkpoint, stops promptly, and reports only its own
progress (docs/versions.md, docs/cli.md `local`). Replays are asserted by records read."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.local.engine import is_our_process, process_cmdline, stop_pid
from zae_limiter.local.processes import AGGREGATOR_MARKER
from zae_limiter.local.stream_runner import StreamRunner, read_status, start_aggregator_process

pytestmark = pytest.mark.ddb


@pytest.fixture
async def repo(live_repo: Repository) -> Repository:
    await live_repo.set_resource_defaults("search", [Limit.per_minute("rpm", 100_000)])
    return live_repo


async def spend(repo: Repository, calls: int, entity_id: str = "user-1") -> None:
    limiter = RateLimiter(repo)
    for _ in range(calls):
        async with limiter.acquire(entity_id, "search", {"rpm": 1}):
            pass


async def consumed(repo: Repository, entity_id: str = "user-1") -> int:
    summary = await repo.get_usage_summary(entity_id=entity_id, resource="search")
    return summary.total.get("rpm", 0)


async def test_a_restart_resumes_from_the_checkpoint_without_replaying(
    repo: Repository, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    await spend(repo, 60)
    async with StreamRunner.from_repository(repo, checkpoint_path=checkpoint) as first:
        while await first.drain():  # until its own snapshot writes have streamed by too
            pass
    assert first.read == first.delivered >= 60
    await spend(repo, 3)
    async with StreamRunner.from_repository(repo, checkpoint_path=checkpoint) as second:
        while await second.drain():
            pass
    # only what was written while it was down: the 3 bucket writes, and the stream records of
    # its own marker and snapshot writes for them (which count nothing)
    assert second.read == second.delivered
    assert 3 <= second.read <= 3 + 3 + 4, second.read
    assert await consumed(repo) == 63
    # without the checkpoint, the whole stream is read again (and changes nothing)
    async with StreamRunner.from_repository(repo) as replay:
        await replay.drain()
    assert replay.read >= first.read + second.read and await consumed(repo) == 63


async def test_a_checkpoint_of_another_stream_is_ignored(repo: Repository, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    checkpoint.write_text(
        json.dumps(
            {
                "stream_arn": "arn:elsewhere",
                "shards": {"shardId-1": {"parent": None, "acked": "999", "done": True}},
            }
        )
    )
    await spend(repo, 2)
    async with StreamRunner.from_repository(repo, checkpoint_path=checkpoint) as runner:
        await runner.drain()
    assert runner.read >= 2 and await consumed(repo) == 2  # read from the beginning


async def test_a_stop_request_is_honoured_after_the_batch_in_hand(repo: Repository) -> None:
    await spend(repo, 120)
    stop = asyncio.Event()
    async with StreamRunner.from_repository(repo, batch_size=20) as runner:
        process = runner.aggregator.process

        async def process_then_stop(records: Any) -> Any:
            stop.set()  # as SIGTERM would, while the first batch is being applied
            return await process(records)

        runner.aggregator.process = process_then_stop  # type: ignore[method-assign]
        assert await runner.drain(stop) == 20  # one batch, not the 120 records behind it
        assert runner.read == 20


async def test_run_abandons_its_batch_on_stop_and_the_next_run_applies_it_once(
    repo: Repository, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    await spend(repo, 50)
    stop = asyncio.Event()
    async with StreamRunner.from_repository(
        repo, batch_size=100, checkpoint_path=checkpoint
    ) as runner:
        process = runner.aggregator.process

        async def stop_mid_batch(records: Any) -> Any:
            stop.set()  # SIGTERM arrives while the batch is in flight
            await asyncio.sleep(3600)  # a batch that would take long: run() must not wait
            return await process(records)

        runner.aggregator.process = stop_mid_batch  # type: ignore[method-assign]
        await asyncio.wait_for(runner.run(stop, poll_interval=0.01), 30)
        assert runner.delivered == 0  # abandoned, never acknowledged
    async with StreamRunner.from_repository(repo, checkpoint_path=checkpoint) as after:
        while await after.drain():
            pass
    assert await consumed(repo) == 50


async def wait_for(predicate: Any, ceiling_s: float) -> None:
    """Poll until `predicate()` holds. The ceiling only keeps a hung process from hanging the
    suite; no assertion is made on how long it took."""
    started = time.monotonic()
    while not await predicate():
        assert time.monotonic() - started < ceiling_s, "still not true at the ceiling: hung?"
        await asyncio.sleep(0.02)


async def test_the_background_aggregator_stops_on_sigterm_and_restarts_at_the_live_end(
    repo: Repository, table: TableRef, tmp_path: Path
) -> None:
    status_path, checkpoint = tmp_path / "aggregator.json", tmp_path / "checkpoint.json"

    def start() -> int:
        return start_aggregator_process(
            table=table.name,
            endpoint_url=table.endpoint_url,
            region=table.region,
            log_path=tmp_path / "aggregator.log",
            status_path=status_path,
            checkpoint_path=checkpoint,
            poll_interval=0.05,
        ).pid

    def stop(pid: int) -> None:
        assert stop_pid(pid), f"aggregator {pid} was not running"

    async def caught_up(pid: int, records: int) -> bool:
        status = read_status(status_path, pid=pid)
        return bool(status and status["records"] >= records and status["lag_ms"] == 0)

    await spend(repo, 20)
    pid = start()
    try:
        await wait_for(lambda: caught_up(pid, 20), 60)  # imports and connects first
        await spend(repo, 150)  # a backlog it is working through when the signal comes
        # its Popen is gone (detached): only a pid still running the aggregator is signalled
        assert is_our_process(pid, (AGGREGATOR_MARKER,)), f"aggregator {pid} is not running"
        os.kill(pid, signal.SIGTERM)

        async def gone() -> bool:
            return process_cmdline(pid) is None

        # Gone within a hang guard, not a timing assertion (0.77 s measured on an idle box with
        # the 150-record backlog). The count-based guarantee is test_run_abandons_its_batch...
        await wait_for(gone, 10)
        before = json.loads(checkpoint.read_text())
        assert before["shards"]
        predecessor = json.loads(status_path.read_text())
        assert predecessor["stopping"] and predecessor["records"] >= 20

        pid = start()

        async def at_live_end() -> bool:
            return await consumed(repo) == 170 and await caught_up(pid, 0)

        await wait_for(at_live_end, 60)
        status = read_status(status_path, pid=pid)
        assert status is not None and status["records_read"] == status["records"]
    finally:
        stop(pid)
    # what a replay reads: the whole stream. The successor read only what its predecessor had
    # not acknowledged (plus the records of its own writes, which a replay reads too).
    async with StreamRunner.from_repository(repo) as replay:
        await replay.drain()
    assert status["records_read"] <= replay.read - predecessor["records"], (status, replay.read)


def test_status_reports_only_the_running_process_and_never_a_stale_zero(tmp_path: Path) -> None:
    path = tmp_path / "aggregator.json"
    now = 1_000_000
    report = {
        "pid": 111,
        "records": 5,
        "pending": 0,
        "caught_up_at_ms": now - 10_000,
        "updated_at_ms": now - 10_000,
        "consecutive_failures": 0,
        "last_error": None,
    }
    path.write_text(json.dumps(report))
    assert read_status(path, pid=222, now_ms=now) is None  # a dead predecessor's report
    stale = read_status(path, pid=111, now_ms=now)
    assert stale is not None and stale["lag_ms"] == 10_000  # not "lag 0 ms"
    path.write_text(
        json.dumps({**report, "updated_at_ms": now - 100, "caught_up_at_ms": now - 100})
    )
    fresh = read_status(path, pid=111, now_ms=now)
    assert fresh is not None and fresh["lag_ms"] == 0
    path.write_text(json.dumps({**report, "updated_at_ms": now - 100, "draining": True}))
    busy = read_status(path, pid=111, now_ms=now)
    assert busy is not None and busy["lag_ms"] == 10_000
