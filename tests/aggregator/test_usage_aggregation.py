"""Usage aggregation end to end on DynamoDB Local: acquire -> stream -> aggregator -> snapshots.

The ledger a snapshot is checked against is the bucket items' own consumption counters
(`get_buckets(...).total_consumed`), plus the arithmetic of each scenario.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from support.clock import FakeClock
from support.faults import ddb_error, inject
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository, UsageSnapshot, ValidationError
from zae_limiter.dynamo import keys, transport
from zae_limiter.local.engine import stop_pid
from zae_limiter.local.stream_runner import (
    AggregationFailed,
    StreamRunner,
    read_status,
    start_aggregator_process,
)
from zae_limiter.usage.aggregator import ATTEMPTS, AggregatorSettings

pytestmark = pytest.mark.ddb

JAN5 = datetime(2026, 1, 5)


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


@pytest.fixture
async def runner(repo: Repository) -> AsyncIterator[StreamRunner]:
    async with StreamRunner.from_repository(repo) as running:
        yield running


async def ledger(repo: Repository, entity_id: str, resource: str) -> dict[str, int]:
    """Net consumption per limit as the bucket items count it, all shards."""
    totals: dict[str, int] = {}
    for state in await repo.get_buckets(entity_id, resource):
        totals[state.limit_name] = totals.get(state.limit_name, 0) + state.total_consumed
    return totals


async def only(
    limiter: RateLimiter, entity_id: str, resource: str, window_type: str
) -> UsageSnapshot:
    snapshots, _ = await limiter.get_usage_snapshots(
        entity_id=entity_id, resource=resource, window_type=window_type
    )
    assert len(snapshots) == 1, snapshots
    return snapshots[0]


async def search_defaults(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("rpm", 100), Limit.per_minute("tpm", 10_000)]
    )


# --- what is counted -------------------------------------------------------------------------


async def test_snapshots_equal_the_ledger(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 5, 10, 15))
    await search_defaults(limiter)
    # first use: creates the bucket; the exit adjustment is a second write
    async with limiter.acquire("user-1", "search", consume={"rpm": 1, "tpm": 100}) as lease:
        await lease.adjust(tpm=50)
    # refunded: nets to zero
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-1", "search", consume={"rpm": 1, "tpm": 10}):
            raise RuntimeError("refund")
    # consume() inside the block
    async with limiter.acquire("user-1", "search", consume={"rpm": 1, "tpm": 5}) as lease:
        await lease.consume(tpm=20)
    assert await runner.drain() > 0
    expected = {"rpm": 2, "tpm": 175}
    assert await ledger(repo, "user-1", "search") == expected
    windows = (("hourly", "2026-01-05T10:00:00Z"), ("daily", "2026-01-05T00:00:00Z"))
    for window_type, start in windows:
        snapshot = await only(limiter, "user-1", "search", window_type)
        assert (snapshot.window_start, snapshot.counters, snapshot.total_events) == (
            start,
            expected,
            2,
        )
        assert snapshot.overdrawn == {}
    assert await runner.drain() == 0  # its own snapshot writes count nothing


async def test_changes_are_keyed_by_event_time(
    limiter: RateLimiter, runner: StreamRunner, clock: FakeClock
) -> None:
    await search_defaults(limiter)
    clock.set_datetime(datetime(2026, 1, 5, 10, 59, 59))
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-1", "search", consume={"rpm": 1}):
            clock.advance(seconds=2)  # the refund is written at 11:00:01
            raise RuntimeError("refund")
    await runner.drain()
    hourly, _ = await limiter.get_usage_snapshots(entity_id="user-1", window_type="hourly")
    assert [(s.window_start, s.counters, s.total_events) for s in hourly] == [
        ("2026-01-05T10:00:00Z", {"rpm": 1}, 1),
        ("2026-01-05T11:00:00Z", {"rpm": -1}, -1),
    ]
    # the day nets to zero: the call debited nothing in the end, so no daily snapshot
    daily, _ = await limiter.get_usage_snapshots(entity_id="user-1", window_type="daily")
    assert daily == []


async def test_cascade_parent_has_its_own_snapshots(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
    )
    await limiter.create_entity(entity_id="org-acme")
    await limiter.create_entity(entity_id="user-3", parent_id="org-acme")
    await repo.set_resource_cascade("search", True)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 1_000_000)], resource="search")
    for units in (100, 250):
        async with limiter.acquire("user-3", "search", consume={"requests": 1, "units": units}):
            pass
    await runner.drain()
    org = await only(limiter, "org-acme", "search", "daily")
    user = await only(limiter, "user-3", "search", "daily")
    assert (org.counters, org.total_events) == ({"units": 350}, 2)  # only what it declares
    assert (user.counters, user.total_events) == ({"requests": 2, "units": 350}, 2)
    assert await ledger(repo, "org-acme", "search") == {"units": 350}


async def test_bypass_and_soft_overdraw_are_counted(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    await search_defaults(limiter)
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True)]
    )
    await repo.create_entity("user-7")  # a bypass refuses an unknown entity (§5.9)
    await repo.bypass_entity("user-7", resource="search")
    async with limiter.acquire(
        "user-7", "search", consume={"rpm": 500}, also={"budget": {"weekly": 9_000_000}}
    ) as lease:
        assert lease.bypassed
        assert lease.resource("budget").overdrawn == ["weekly"]
    async with limiter.acquire(
        "user-7", "search", consume={"rpm": 1}, also={"budget": {"weekly": 1}}
    ):
        pass
    await runner.drain()
    search = await only(limiter, "user-7", "search", "daily")
    assert (search.counters, search.total_events) == ({"rpm": 501}, 2)
    budget = await only(limiter, "user-7", "budget", "daily")
    assert (budget.counters, budget.overdrawn, budget.total_events) == (
        {"weekly": 9_000_001},
        {"weekly": 2},
        2,
    )


async def test_monthly_windows_when_configured(
    limiter: RateLimiter, repo: Repository, clock: FakeClock
) -> None:
    await search_defaults(limiter)
    for day in (5, 20):
        clock.set_datetime(datetime(2026, 1, day, 12))
        async with limiter.acquire("user-1", "search", consume={"rpm": 3}):
            pass
    settings = AggregatorSettings(windows=("hourly", "daily", "monthly"))
    async with StreamRunner.from_repository(repo, settings=settings) as runner:
        await runner.drain()
    monthly = await only(limiter, "user-1", "search", "monthly")
    assert (monthly.window_start, monthly.window_end, monthly.counters) == (
        "2026-01-01T00:00:00Z",
        "2026-02-01T00:00:00Z",
        {"rpm": 6},
    )
    summary = await limiter.get_usage_summary(entity_id="user-1", window_type="monthly")
    assert (summary.snapshot_count, summary.total) == (1, {"rpm": 6})


# --- exactly once ----------------------------------------------------------------------------


async def _ledger_batch(limiter: RateLimiter, runner: StreamRunner) -> list[dict[str, Any]]:
    """Three users' acquires (one refunded); returns their stream records, unprocessed."""
    await search_defaults(limiter)
    for i, user in enumerate(("user-1", "user-2", "user-3")):
        consume = {"rpm": 1, "tpm": 10 * (i + 1)}
        async with limiter.acquire(user, "search", consume=consume) as lease:
            await lease.adjust(tpm=1)
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-2", "search", consume={"rpm": 1}):
            raise RuntimeError("refund")
    return [record for event in await runner.poll() for record in event["Records"]]


async def _assert_users(limiter: RateLimiter) -> None:
    for i, user in enumerate(("user-1", "user-2", "user-3")):
        for window_type in ("hourly", "daily"):
            snapshot = await only(limiter, user, "search", window_type)
            assert (snapshot.counters, snapshot.total_events) == (
                {"rpm": 1, "tpm": 10 * (i + 1) + 1},
                1,
            )


async def test_the_same_batch_twice_changes_nothing(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    records = await _ledger_batch(limiter, runner)
    first = await runner.aggregator.process(records)
    assert not first.failures and first.applied == 8  # 3 creations, 3 adjustments, debit, refund
    again = await runner.aggregator.process(records)
    assert (again.applied, again.duplicates, again.failures) == (0, 8, {})
    await _assert_users(limiter)


async def test_a_partial_replay_applies_only_what_is_new(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    records = await _ledger_batch(limiter, runner)
    half = len(records) // 2
    head = await runner.aggregator.process(records[:half])
    whole = await runner.aggregator.process(records)
    assert head.applied + whole.applied == 8
    assert whole.duplicates == head.applied
    await _assert_users(limiter)


async def test_a_failed_record_fails_alone_then_succeeds_on_retry(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    records = await _ledger_batch(limiter, runner)
    buckets = [r for r in records if r["dynamodb"]["Keys"]["SK"]["S"] == "#B"]
    victim = buckets[3]
    client = runner.aggregator.store.transport.client

    def fail_the_victim(request: Any, **_: Any) -> Any:
        if victim["eventID"].encode() in request.body:
            return ddb_error("ValidationException", "injected for one record")
        return None

    client.meta.events.register(
        "before-send.dynamodb.TransactWriteItems", fail_the_victim, unique_id="victim"
    )
    try:
        outcome = await runner.aggregator.process(records)
    finally:
        client.meta.events.unregister("before-send.dynamodb.TransactWriteItems", unique_id="victim")
    assert outcome.response() == {
        "batchItemFailures": [{"itemIdentifier": victim["dynamodb"]["SequenceNumber"]}]
    }
    assert outcome.applied == 7
    # Lambda redelivers from the failed record on: only it is applied now
    start = records.index(victim)
    retry = await runner.aggregator.process(records[start:])
    assert (retry.applied, retry.failures) == (1, {})
    await _assert_users(limiter)


async def test_contention_is_retried_inside_the_batch(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    records = await _ledger_batch(limiter, runner)
    conflict = ddb_error(
        "TransactionCanceledException",
        CancellationReasons=[{"Code": "None"}, {"Code": "TransactionConflict"}],
    )
    with inject(runner.aggregator.store.transport.client, "TransactWriteItems", [conflict]):
        outcome = await runner.aggregator.process(records)
    assert (outcome.applied, outcome.failures) == (8, {})
    await _assert_users(limiter)


async def test_contention_that_persists_fails_the_batch_without_applying_any(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    records = await _ledger_batch(limiter, runner)
    conflict = ddb_error(
        "TransactionCanceledException", CancellationReasons=[{"Code": "TransactionConflict"}]
    )
    client = runner.aggregator.store.transport.client
    with inject(client, "TransactWriteItems", [conflict] * ATTEMPTS) as plan:
        outcome = await runner.aggregator.process(records)
    assert plan.sent == ATTEMPTS  # retried, never halved
    assert outcome.applied == 0 and len(outcome.failures) == 8
    retry = await runner.aggregator.process(records)
    assert (retry.applied, retry.failures) == (8, {})
    await _assert_users(limiter)


async def test_runner_redelivers_failed_records_like_lambda(
    limiter: RateLimiter, repo: Repository
) -> None:
    await search_defaults(limiter)
    async with limiter.acquire("user-1", "search", consume={"rpm": 2}):
        pass
    async with StreamRunner.from_repository(repo, max_attempts=2) as running:
        client = running.aggregator.store.transport.client
        plan = [ddb_error("ValidationException", "down")] * 2
        with (
            inject(client, "TransactWriteItems", plan),
            pytest.raises(AggregationFailed, match="still fail"),
        ):
            await running.drain()
        assert await running.drain() > 0  # the pending records, delivered again
    assert (await only(limiter, "user-1", "search", "daily")).counters == {"rpm": 2}


# --- reading snapshots -----------------------------------------------------------------------


@pytest.fixture
async def history(limiter: RateLimiter, runner: StreamRunner, clock: FakeClock) -> None:
    """user-a: search at Jan 5 10:15 and 11:15 and Jan 6 09:15, translate at Jan 5 10:15;
    user-b: search x2 at Jan 5 10:15."""
    await search_defaults(limiter)
    await limiter.set_resource_defaults("translate", [Limit.per_minute("rpm", 100)])
    plan = [
        (datetime(2026, 1, 5, 10, 15), "user-a", "search", 1),
        (datetime(2026, 1, 5, 10, 15), "user-a", "translate", 1),
        (datetime(2026, 1, 5, 10, 15), "user-b", "search", 2),
        (datetime(2026, 1, 5, 11, 15), "user-a", "search", 1),
        (datetime(2026, 1, 6, 9, 15), "user-a", "search", 1),
    ]
    for when, entity, resource, rpm in plan:
        clock.set_datetime(when)
        async with limiter.acquire(entity, resource, consume={"rpm": rpm}):
            pass
    await runner.drain()


def rows(snapshots: list[UsageSnapshot]) -> list[tuple[str, str, str, str, int]]:
    return [
        (s.entity_id, s.resource, s.window_type, s.window_start[:13], s.counters["rpm"])
        for s in snapshots
    ]


@pytest.mark.usefixtures("history")
async def test_listing_by_entity_resource_window_and_time(limiter: RateLimiter) -> None:
    listed, more = await limiter.get_usage_snapshots(entity_id="user-a")
    assert more is None
    assert rows(listed) == [
        ("user-a", "search", "daily", "2026-01-05T00", 2),
        ("user-a", "search", "daily", "2026-01-06T00", 1),
        ("user-a", "search", "hourly", "2026-01-05T10", 1),
        ("user-a", "search", "hourly", "2026-01-05T11", 1),
        ("user-a", "search", "hourly", "2026-01-06T09", 1),
        ("user-a", "translate", "daily", "2026-01-05T00", 1),
        ("user-a", "translate", "hourly", "2026-01-05T10", 1),
    ]
    window, _ = await limiter.get_usage_snapshots(
        entity_id="user-a",
        resource="search",
        window_type="hourly",
        start_time="2026-01-05T11:00:00Z",
        end_time=datetime(2026, 1, 6, 9),
    )
    assert rows(window) == [("user-a", "search", "hourly", "2026-01-05T11", 1)]
    by_resource, _ = await limiter.get_usage_snapshots(resource="search", window_type="hourly")
    assert rows(by_resource) == [
        ("user-a", "search", "hourly", "2026-01-05T10", 1),
        ("user-b", "search", "hourly", "2026-01-05T10", 2),
        ("user-a", "search", "hourly", "2026-01-05T11", 1),
        ("user-a", "search", "hourly", "2026-01-06T09", 1),
    ]
    since, _ = await limiter.get_usage_snapshots(resource="search", start_time="2026-01-06")
    assert rows(since) == [
        ("user-a", "search", "daily", "2026-01-06T00", 1),
        ("user-a", "search", "hourly", "2026-01-06T09", 1),
    ]
    untyped, _ = await limiter.get_usage_snapshots(
        entity_id="user-a", resource="search", end_time="2026-01-05T11:00:00+00:00"
    )
    assert rows(untyped) == [
        ("user-a", "search", "daily", "2026-01-05T00", 2),
        ("user-a", "search", "hourly", "2026-01-05T10", 1),
    ]


@pytest.mark.usefixtures("history")
@pytest.mark.parametrize(
    "filters",
    [
        {"entity_id": "user-a"},
        {"resource": "search"},
        {"resource": "search", "window_type": "hourly"},
    ],
)
async def test_pagination_returns_every_snapshot_once(
    limiter: RateLimiter, filters: dict[str, Any]
) -> None:
    everything, _ = await limiter.get_usage_snapshots(**filters)
    paged: list[UsageSnapshot] = []
    next_key: str | None = None
    pages = 0
    while True:
        page, next_key = await limiter.get_usage_snapshots(**filters, limit=2, next_key=next_key)
        paged += page
        pages += 1
        assert len(page) <= 2
        if next_key is None:
            break
    assert paged == everything
    assert pages == (len(everything) + 1) // 2


@pytest.mark.usefixtures("history")
async def test_summary_sums_one_window_type_only(limiter: RateLimiter) -> None:
    daily = await limiter.get_usage_summary(entity_id="user-a", resource="search")
    assert (daily.window_type, daily.snapshot_count, daily.total, daily.average) == (
        "daily",
        2,
        {"rpm": 3},
        {"rpm": 1.5},
    )
    assert (daily.min_window_start, daily.max_window_start) == (
        "2026-01-05T00:00:00Z",
        "2026-01-06T00:00:00Z",
    )
    hourly = await limiter.get_usage_summary(
        entity_id="user-a", resource="search", window_type="hourly"
    )
    assert (hourly.snapshot_count, hourly.total) == (3, {"rpm": 3})  # never 6
    everyone = await limiter.get_usage_summary(resource="search", end_time="2026-01-06")
    assert (everyone.snapshot_count, everyone.total) == (2, {"rpm": 4})
    nothing = await limiter.get_usage_summary(entity_id="user-z")
    assert (nothing.snapshot_count, nothing.total, nothing.min_window_start) == (0, {}, None)


@pytest.mark.usefixtures("history")
async def test_expired_snapshots_are_left_out(limiter: RateLimiter, clock: FakeClock) -> None:
    # retention 90 days after the window ends: the 10:00 hour is gone, the 11:00 hour is not
    clock.set_datetime(datetime(2026, 4, 5, 11, 0, 1))
    hourly, _ = await limiter.get_usage_snapshots(
        entity_id="user-a", resource="search", window_type="hourly"
    )
    assert rows(hourly) == [
        ("user-a", "search", "hourly", "2026-01-05T11", 1),
        ("user-a", "search", "hourly", "2026-01-06T09", 1),
    ]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "entity_id"),
        ({"entity_id": "user-a", "window_type": "weekly"}, "window_type"),
        ({"entity_id": "user-a", "limit": 0}, "limit"),
        ({"entity_id": "user-a", "start_time": "noon"}, "start_time"),
        ({"entity_id": "user a"}, "entity_id"),
        ({"entity_id": "user-a", "next_key": "not-a-key"}, "next_key"),
    ],
)
async def test_listing_validation(limiter: RateLimiter, kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        await limiter.get_usage_snapshots(**kwargs)
    assert raised.value.field == field


@pytest.mark.usefixtures("history")
async def test_a_next_key_only_continues_its_own_listing(limiter: RateLimiter) -> None:
    _, next_key = await limiter.get_usage_snapshots(entity_id="user-a", limit=1)
    assert next_key is not None
    with pytest.raises(ValidationError):
        await limiter.get_usage_snapshots(entity_id="user-b", next_key=next_key)
    with pytest.raises(ValidationError):
        await limiter.get_usage_snapshots(resource="search", next_key=next_key)


# --- the seed page: roll-up per organisation -----------------------------------------------------


async def test_roll_up_per_organisation(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
    )
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 5_000_000, cron="0 0 * * 1")]
    )
    await limiter.create_entity(entity_id="org-acme")
    await repo.set_resource_cascade("search", True)
    await repo.set_resource_cascade("budget", False)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 1_000_000)], resource="search")
    spend = {"user-5": [(100, 7_000), (140, 9_000)], "user-6": [(60, 4_000)]}
    for user_id, calls in spend.items():
        await limiter.create_entity(entity_id=user_id, parent_id="org-acme")
        for units, price in calls:
            async with limiter.acquire(
                user_id,
                "search",
                consume={"requests": 1, "units": units},
                also={"budget": {"weekly": price}},
            ):
                pass
    await runner.drain()

    # the seed page's code, unchanged
    search = await limiter.get_usage_summary(entity_id="org-acme", resource="search")
    weekly_spend = 0
    for user in await limiter.get_children("org-acme"):
        summary = await limiter.get_usage_summary(entity_id=user.id, resource="budget")
        weekly_spend += summary.total.get("weekly", 0)

    assert search.total == {"units": 300}  # the org declares units only
    assert weekly_spend == 20_000
    org_budget = await limiter.get_usage_summary(entity_id="org-acme", resource="budget")
    assert org_budget.snapshot_count == 0  # the budget does not cascade


# --- the brief's Python API, and `local up`'s background process -------------------------------


async def test_python_api_flow_with_a_local_aggregator(ddb_endpoint: str, table_name: str) -> None:
    await Repository.create_table(table=table_name, endpoint_url=ddb_endpoint)
    repo = await Repository.open(table=table_name, endpoint_url=ddb_endpoint)
    try:
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
        async with limiter.acquire("user-1", "search", consume={"rpm": 1}) as lease:
            await lease.adjust(rpm=2)
        async with StreamRunner.from_repository(repo) as running:
            await running.drain()
        summary = await limiter.get_usage_summary(entity_id="user-1", resource="search")
        assert (summary.snapshot_count, summary.total) == (1, {"rpm": 3})
    finally:
        await repo.close()
        await Repository.delete_table(table=table_name, endpoint_url=ddb_endpoint)


@pytest.fixture
def background(table: TableRef, tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    log_path, status_path = tmp_path / "aggregator.log", tmp_path / "aggregator.json"
    process = start_aggregator_process(
        table=table.name,
        endpoint_url=table.endpoint_url,
        region=table.region,
        log_path=log_path,
        status_path=status_path,
        poll_interval=0.1,
    )
    try:
        yield log_path, status_path
    finally:
        assert stop_pid(process.pid, markers=(process.marker,))


async def test_background_aggregator_process(
    limiter: RateLimiter, background: tuple[Path, Path]
) -> None:
    log_path, status_path = background
    await search_defaults(limiter)
    async with limiter.acquire("user-1", "search", consume={"rpm": 4}):
        pass
    snapshots: list[UsageSnapshot] = []
    for _ in range(600):  # the process imports and connects first; up to 60 s on a busy box
        snapshots, _ = await limiter.get_usage_snapshots(entity_id="user-1", window_type="daily")
        if snapshots:
            break
        await asyncio.sleep(0.1)
    assert [s.counters for s in snapshots] == [{"rpm": 4}], log_path.read_text()
    status = read_status(status_path)
    for _ in range(100):
        status = read_status(status_path)
        if status and status["records"] > 0 and status["lag_ms"] == 0:
            break
        await asyncio.sleep(0.1)
    assert status is not None and status["pid"] != os.getpid(), status
    assert status["records"] > 0 and status["last_error"] is None


async def test_a_concurrency_limit_nets_to_zero_over_its_leases(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    """Held vs given back: each hold counts when admitted and is taken off when given back (on
    exit, on a refund), so whole leases net to zero; an open one shows what it holds."""
    await limiter.set_resource_defaults(
        "llm", [Limit.per_minute("requests", 100), Limit.concurrent("parallel", 4)]
    )
    async with limiter.acquire("user-1", "llm", {"requests": 1, "parallel": 2}):
        pass
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
            raise RuntimeError("refunded: nothing counts")
    async with limiter.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
        await runner.drain()
        held = await only(limiter, "user-1", "llm", "hourly")
        assert (held.counters, held.total_events) == ({"requests": 2, "parallel": 1}, 2)
        assert await ledger(repo, "user-1", "llm") == {"requests": 2, "parallel": 1}
    await runner.drain()
    done = await only(limiter, "user-1", "llm", "hourly")
    assert (done.counters, done.total_events) == ({"requests": 2, "parallel": 0}, 2)
    assert await ledger(repo, "user-1", "llm") == {"requests": 2, "parallel": 0}


# --- records that cannot be applied ----------------------------------------------------------


async def test_the_aggregator_warns_only_about_a_recorded_version_that_differs(
    repo: Repository, caplog: pytest.LogCaptureFixture
) -> None:
    """A table `create_table` made records no aggregator (`local up`'s): no warning at each
    start. A recorded version other than the aggregator's own is worth one."""
    with caplog.at_level(logging.WARNING, logger="zae_limiter.usage.aggregator"):
        async with StreamRunner.from_repository(repo) as running:
            await running.drain()
        assert not [r for r in caplog.records if "aggregator_version" in r.getMessage()]
        await repo.set_version_record(aggregator_version="0.16.0")
        async with StreamRunner.from_repository(repo) as running:
            await running.aggregator.check_version()
            await running.drain()
    [warning] = [r.getMessage() for r in caplog.records if "aggregator_version" in r.getMessage()]
    assert warning.endswith("records aggregator_version 0.16.0")


async def test_a_sharded_bucket_with_a_concurrency_limit_is_aggregated(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    """Sharding a bucket with holds makes DynamoDB Local's stream carry its empty hold maps as
    `{}`: decoded as the empty maps they are, not a record that stops the aggregator."""
    await limiter.set_resource_defaults(
        "llm", [Limit.per_minute("requests", 100), Limit.concurrent("parallel", 4)]
    )
    async with limiter.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
        pass
    await repo.set_shards("user-1", "llm", 2)
    for _ in range(4):
        async with limiter.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
            pass
    await runner.drain()
    done = await only(limiter, "user-1", "llm", "hourly")
    assert (done.counters["requests"], done.counters.get("parallel", 0)) == (5, 0)
    assert done.total_events == 5
    assert await ledger(repo, "user-1", "llm") == {"requests": 5, "parallel": 0}


async def test_a_record_that_keeps_failing_is_dead_lettered_and_the_rest_apply(
    limiter: RateLimiter, repo: Repository, tmp_path: Path
) -> None:
    """A poisoned bucket record between good ones, in two namespaces: retried, then written to
    the dead-letter file with its reason and passed over; the records before and after it, of
    both namespaces, are applied, and later records keep flowing."""
    await repo.register_namespace("tenant-b")
    other = await repo.namespace("tenant-b")
    for scope in (repo, other):
        await RateLimiter(scope).set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    async with limiter.acquire("user-1", "search", consume={"rpm": 1}):
        pass
    poisoned = {
        **keys.bucket(repo.namespace_id, "user-bad", "search"),
        "ts": "yesterday",  # a write time that is not a number: no window to count it in
        "n": 1,
    }
    await repo.scope.store.put(poisoned)
    async with RateLimiter(other).acquire("user-2", "search", consume={"rpm": 2}):
        pass
    dead = tmp_path / "dead-letters.jsonl"
    async with StreamRunner.from_repository(repo, dead_letter_path=dead, max_attempts=2) as run:
        await run.drain()
        assert run.dead_lettered == 1
        async with limiter.acquire("user-1", "search", consume={"rpm": 4}):
            pass
        await run.drain()  # the shard is not held up behind the poisoned record
    assert (await only(limiter, "user-1", "search", "daily")).counters == {"rpm": 5}
    assert (await only(RateLimiter(other), "user-2", "search", "daily")).counters == {"rpm": 2}
    [line] = [json.loads(text) for text in dead.read_text().splitlines()]
    assert line["record"]["dynamodb"]["Keys"]["PK"]["S"] == poisoned["PK"]
    assert line["attempts"] == 2 and line["table"] == repo.table_name
    assert (
        line["reason"].startswith("MalformedRecord: ") and "ts must be an integer" in line["reason"]
    )
