"""Threshold alerts end to end on DynamoDB Local's stream: acquire -> stream -> aggregator ->
alert items (docs/alerts.md). Each crossing is stored exactly once, whatever the delivery."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from botocore.config import Config

from support.clock import FakeClock
from support.outage import outage_proxy
from support.tables import TableRef
from zae_limiter import (
    AlertEvent,
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ValidationError,
)
from zae_limiter.alerts.held import HOLD_MS
from zae_limiter.core.bounds import ASSUMED_SKEW_MS
from zae_limiter.dynamo import keys
from zae_limiter.dynamo.failures import ConditionFailed, UnknownOutcome
from zae_limiter.local.stream_runner import StreamRunner

pytestmark = pytest.mark.ddb


def crossed(alerts: list[AlertEvent]) -> list[tuple[str, str, int, int]]:
    """(entity, limit, threshold, used), oldest first."""
    return sorted(
        ((a.entity_id, a.limit_name, a.threshold, a.used) for a in alerts),
        key=lambda t: (t[0], t[1], t[2]),
    )


async def spend(limiter: RateLimiter, entity: str, resource: str, **amounts: int) -> None:
    async with limiter.acquire(entity, resource, consume=amounts):
        pass


async def test_calendar_quota_alerts_once_per_threshold_per_period(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))  # a Tuesday
    weekly = Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(50, 80, 100))
    await repo.set_resource_defaults("budget", [weekly])
    for amount in (49, 1, 29, 1, 20):  # 49, 50 (crosses 50), 79, 80 (80), 100 (100)
        await spend(limiter, "u1", "budget", weekly=amount)
    await runner.drain()
    alerts, cursor = await repo.get_alerts("u1")
    assert cursor is None
    assert [(a.threshold, a.used, a.capacity) for a in alerts] == [
        (100, 100, 100),
        (80, 80, 100),
        (50, 50, 100),
    ]
    assert {a.period_start for a in alerts} == {"2026-01-05T00:00:00Z"}
    assert alerts[2].crossed_at == "2026-01-06T09:00:00Z" and not alerts[0].soft
    # the next period re-arms every threshold
    clock.set_datetime(datetime(2026, 1, 13, 9, 0))
    await spend(limiter, "u1", "budget", weekly=85)
    await runner.drain()
    alerts, _ = await repo.get_alerts("u1")
    assert sorted((a.period_start, a.threshold) for a in alerts[:2]) == [
        ("2026-01-12T00:00:00Z", 50),
        ("2026-01-12T00:00:00Z", 80),
    ]
    assert len(alerts) == 5


async def test_refund_does_not_rearm_but_top_up_and_reset_below_do(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    weekly = Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(80,))
    await repo.set_resource_defaults("budget", [weekly])
    async with limiter.acquire("u2", "budget", consume={"weekly": 90}) as lease:
        await lease.adjust(weekly=-20)  # a refund: down to 70, back below 80
    await spend(limiter, "u2", "budget", weekly=15)  # 85: up again, nothing new
    await repo.top_up("u2", "budget", {"weekly": 10})  # 75: below 80, re-armed
    await spend(limiter, "u2", "budget", weekly=10)  # 85: crosses 80 again
    await spend(limiter, "u2", "budget", weekly=1)  # 86: nothing
    await repo.top_up("u2", "budget", {"weekly": 2})  # 84: still above, so no crossing
    await spend(limiter, "u2", "budget", weekly=5)  # 89: nothing
    await repo.reset_bucket("u2", "budget")  # full, with this week's top-ups: -12, re-armed
    await spend(limiter, "u2", "budget", weekly=92)  # 80: crosses again
    records = await _records(runner)
    assert (await runner.aggregator.process(records)).alerts_stored == 3
    assert (await runner.aggregator.process(records)).alerts_stored == 0  # redelivered
    alerts, _ = await repo.get_alerts("u2")
    assert sorted((a.used, a.rearm, a.period_start) for a in alerts) == [
        (80, 3, "2026-01-05T00:00:00Z"),
        (85, 1, "2026-01-05T00:00:00Z"),
        (90, 0, "2026-01-05T00:00:00Z"),
    ]
    assert len({a.alert_id for a in alerts}) == 3
    # balance-only writes count no usage: only the five debits and the refund
    snapshots, _ = await repo.get_usage_snapshots(entity_id="u2", window_type="daily")
    assert [(s.counters, s.total_events) for s in snapshots] == [({"weekly": 193}, 6)]


async def test_every_shard_keeps_one_rearm_count_through_restamps_and_splits(
    limiter: RateLimiter, repo: Repository, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    weekly = Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(80,))
    await repo.set_resource_defaults("budget", [weekly])

    async def counts() -> list[int]:
        found = [
            await repo._store.get(keys.bucket(repo._ns, "u4", "budget", shard))
            for shard in range(await repo.set_shards("u4", "budget", 1))
        ]
        return [int(item.get("ag", 0)) for item in found if item is not None]

    await spend(limiter, "u4", "budget", weekly=10)
    assert await counts() == [0]  # acquire never writes it
    await repo.top_up("u4", "budget", {"weekly": 5})
    assert await counts() == [1]
    await repo.set_resource_defaults("budget", [replace(weekly, alert_at=(80, 90))])
    await spend(limiter, "u4", "budget", weekly=1)  # restamped under the new config
    assert await counts() == [1]
    assert await repo.set_shards("u4", "budget", 2) == 2  # split: the new shard copies it
    assert await counts() == [1, 1]
    await repo.top_up("u4", "budget", {"weekly": 10})
    await repo.reset_bucket("u4", "budget")
    assert await counts() == [3, 3]


async def test_a_session_reset_starts_a_new_period(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    session = Limit.quota("session", 100, reset_after=timedelta(hours=5), alert_at=(80,))
    await repo.set_resource_defaults("budget", [session])
    await spend(limiter, "u3", "budget", session=90)
    await repo.reset_bucket("u3", "budget")
    clock.advance(seconds=1)
    await spend(limiter, "u3", "budget", session=80)
    await runner.drain()
    alerts, _ = await repo.get_alerts("u3")
    assert [(a.threshold, a.used, a.period_start, a.rearm) for a in alerts] == [
        (80, 80, "2026-01-06T09:00:01Z", 1),
        (80, 90, "2026-01-06T09:00:00Z", 0),
    ]


async def test_rate_limit_crosses_when_its_balance_falls_to_the_share(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0, 10))
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 10, alert_at=(50, 100))])
    for _ in range(5):
        await spend(limiter, "u3", "search", rpm=1)  # balance 5 of 10: 50 %
    clock.advance(seconds=30)  # refills 5: back to full, below 50 %
    await spend(limiter, "u3", "search", rpm=4)  # 40 %: nothing
    await spend(limiter, "u3", "search", rpm=6)  # 100 % in the next minute
    await runner.drain()
    alerts, _ = await repo.get_alerts("u3")
    assert [(a.threshold, a.period_start) for a in alerts] == [
        (100, "2026-01-06T09:00:00Z"),
        (50, "2026-01-06T09:00:00Z"),
    ]


async def test_a_raised_ceiling_is_not_use(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    """set_limits raises rpm 20 -> 40 on a full bucket: the raise is headroom, not use (12
    calls cross nothing; 20 and 32 real units cross 50 % and 80 %). Before, the raise's 20
    counted as use and the 12th call crossed 80 %."""
    clock.set_datetime(datetime(2026, 1, 6, 9, 0, 10))
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 20, alert_at=(50, 80))])
    await spend(limiter, "u5", "search", rpm=1)
    clock.advance(seconds=5)  # full again
    await repo.set_limits("u5", [Limit.per_minute("rpm", 40, alert_at=(50, 80))], "search")
    for _ in range(12):
        await spend(limiter, "u5", "search", rpm=1)
    await runner.drain()
    assert (await repo.get_alerts("u5"))[0] == []
    clock.advance(seconds=30)  # refill at 40/min pays the raise's 20 first: still 12 used
    for _ in range(20):
        await spend(limiter, "u5", "search", rpm=1)
    await runner.drain()
    alerts, _ = await repo.get_alerts("u5")
    assert [(a.threshold, a.used, a.capacity) for a in alerts] == [(80, 32, 40), (50, 20, 40)]


async def test_soft_limit_alerts_above_100_and_parents_on_their_own_limits(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    await repo.create_entity("org")
    await repo.create_entity("kid", parent_id="org")
    await repo.set_resource_cascade("budget", True)
    await repo.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", soft=True, alert_at=(100, 150))]
    )
    await repo.set_limits(
        "org", [Limit.quota("weekly", 1000, cron="0 0 * * 1", alert_at=(10,))], resource="budget"
    )
    await spend(limiter, "kid", "budget", weekly=160)
    await runner.drain()
    kid, _ = await repo.get_alerts("kid")
    assert [(a.threshold, a.used, a.soft) for a in kid] == [(150, 160, True), (100, 160, True)]
    org, _ = await repo.get_alerts("org")
    assert [(a.threshold, a.used, a.capacity) for a in org] == [(10, 160, 1000)]
    everyone, _ = await repo.get_alerts()
    assert sorted(a.entity_id for a in everyone) == ["kid", "kid", "org"]


async def test_pages_since_and_validation(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    await repo.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(10, 20, 30))]
    )
    for entity in ("a", "b"):
        for _ in range(3):
            clock.advance(seconds=60)
            await spend(limiter, entity, "budget", weekly=10)
    await runner.drain()
    first, cursor = await repo.get_alerts(limit=4)
    rest, end = await repo.get_alerts(limit=4, cursor=cursor)
    assert end is None and len(first) == 4 and len(rest) == 2
    times = [a.crossed_at for a in first + rest]
    assert times == sorted(times, reverse=True)
    recent, _ = await repo.get_alerts(since=datetime(2026, 1, 6, 9, 5))
    assert [(a.entity_id, a.threshold) for a in recent] == [("b", 30), ("b", 20)]
    with pytest.raises(ValidationError, match="cursor"):
        await repo.get_alerts("a", cursor=cursor)
    with pytest.raises(ValidationError, match="alert_at"):
        Limit.per_minute("rpm", 10, alert_at=(0,))
    with pytest.raises(ValidationError, match="once"):
        Limit.per_minute("rpm", 10, alert_at=(80, 80))
    assert Limit.per_minute("rpm", 10, alert_at=(100, 80)).alert_at == (80, 100)


# --- exactly once ------------------------------------------------------------------------------


async def _records(runner: StreamRunner) -> list[dict[str, Any]]:
    return [record for event in await runner.poll() for record in event["Records"]]


async def test_redelivered_bisected_and_raced_batches_store_each_alert_once(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    await repo.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(50, 80, 100))]
    )
    for entity in ("x", "y", "z"):
        for _ in range(4):
            await spend(limiter, entity, "budget", weekly=25)
    records = await _records(runner)
    table = runner.aggregator.table
    async with StreamRunner.from_repository(repo) as other:
        a, b = runner.aggregator, other.aggregator
        assert a.table == b.table == table
        first, second = await asyncio.gather(a.process(records), b.process(records))
        assert not first.failures and not second.failures
        assert first.alerts_stored + second.alerts_stored == 9
        again = await a.process(records)  # redelivered whole
        half = len(records) // 2
        parts = [await b.process(records[:half]), await b.process(records[half:])]  # bisected
    assert again.alerts_stored == 0 and sum(p.alerts_stored for p in parts) == 0
    alerts, _ = await repo.get_alerts()
    # 25 at a time: 50 is crossed at 50, 80 and 100 by the write that reaches 100
    assert crossed(alerts) == [
        (e, "weekly", t, used)
        for e in ("x", "y", "z")
        for t, used in ((50, 50), (80, 100), (100, 100))
    ]
    assert len({a.alert_id for a in alerts}) == 9


# --- only consumption that stays alerts (docs/alerts.md) -----------------------------------------
# A debit refunded because its call was refused all or none, or because its caller left during an
# outage, never causes an alert, however late its refund reaches the aggregator; a debit that
# stays alerts once its hold has passed. The writers' and the aggregator's clocks are one
# `FakeClock`, so that holds pass when the test says. Before held crossings, each of these
# refused or refunded debits stored an alert at once.

REFUNDED_WEEKLY = Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(50,))


async def open_at(
    table: TableRef, clock: FakeClock, url: str | None = None, **kw: Any
) -> Repository:
    return await Repository.open(
        table=table.name, endpoint_url=url or table.endpoint_url, region=table.region, clock=clock,
        **kw,
    )  # fmt: skip


async def budget_records(runner: StreamRunner, repo: Repository, entity: str) -> list[Any]:
    """The stream records of the entity's budget item, in order (the others are read too)."""
    pk = keys.bucket(repo.namespace_id, entity, "budget")["PK"]
    events = await runner.poll()
    return [r for e in events for r in e["Records"] if r["dynamodb"]["Keys"]["PK"]["S"] == pk]


async def stored_alerts(repo: Repository, entity: str) -> list[tuple[int, int]]:
    alerts, _ = await repo.get_alerts(entity)
    return [(a.threshold, a.used) for a in alerts]


async def refused_all_or_none(
    table: TableRef, clock: FakeClock
) -> tuple[Repository, Repository, RateLimiter]:
    """Two processes' repositories and the first one's limiter, after a call of the first one
    was refused all or none: its budget debit (60 % of "u"'s weekly) landed, then its refund."""
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    mine, theirs = await open_at(table, clock), await open_at(table, clock)
    await mine.set_resource_defaults("budget", [REFUNDED_WEEKLY])
    await mine.set_resource_defaults("search", [Limit.per_day("rpm", 2)])
    me = RateLimiter(mine)
    async with me.acquire("u", "search", {"rpm": 1}):
        pass  # warm: this process has both items and sees one unit of search left
    async with me.acquire("u", "budget", {"weekly": 1}) as lease:
        await lease.adjust(weekly=-1)
    async with RateLimiter(theirs).acquire("u", "search", {"rpm": 1}):
        pass  # another process takes the last unit, unseen by `mine`
    with pytest.raises(RateLimitExceeded):  # search refuses; budget's debit (60 %) had landed
        async with me.acquire("u", "search", {"rpm": 1}, also={"budget": {"weekly": 60}}):
            pass
    return mine, theirs, me


async def test_an_all_or_none_refusal_whose_refund_comes_in_a_later_batch_never_alerts(
    table: TableRef, clock: FakeClock
) -> None:
    mine, theirs, me = await refused_all_or_none(table, clock)
    async with StreamRunner.from_repository(mine, clock=clock) as runner:
        debit, refund = (await budget_records(runner, mine, "u"))[-2:]
        first = await runner.aggregator.process([debit])  # the crossing: held, not stored
        second = await runner.aggregator.process([refund])  # a later batch: its refund
        assert (first.alerts_stored, second.alerts_stored) == (0, 0)
        assert runner.aggregator.held.dropped == 1
        clock.advance(HOLD_MS + 1)
        assert (await runner.aggregator.held.sweep_now()).alerts_stored == 0
        async with me.acquire("u", "budget", {"weekly": 60}):
            pass  # a debit that stays: held, then stored
        await runner.drain()
        assert await stored_alerts(mine, "u") == []
        clock.advance(HOLD_MS + 1)
        await runner.drain()
    assert await stored_alerts(mine, "u") == [(50, 60)]
    for repo in (mine, theirs):
        await repo.close()


async def test_a_refund_after_a_long_outage_drops_the_crossing_its_debit_made(
    table: TableRef, clock: FakeClock
) -> None:
    """The caller leaves at its deadline while its debit lands (the answer is lost); the table
    then fails everything for what the clocks see as two minutes, during which the aggregator
    reads the crossing. When the table answers again the writer decides its write by reading its
    entry, and refunds: the crossing is dropped."""
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    admin = await open_at(table, clock)
    await admin.set_resource_defaults("budget", [REFUNDED_WEEKLY])
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await open_at(
            table, clock, proxy.url, acquire_timeout=0.3,
            client_config=Config(connect_timeout=1, read_timeout=1),
        )  # fmt: skip
        limiter = RateLimiter(repo)
        async with limiter.acquire("u", "budget", {"weekly": 1}, timeout=None) as lease:
            await lease.adjust(weekly=-1)
        await proxy.set_mode("drop")  # the write lands, its answer is lost
        with pytest.raises(RateLimiterUnavailable):
            async with limiter.acquire("u", "budget", {"weekly": 60}):
                pass
        await proxy.set_mode("error500")
        clock.advance(minutes=2)  # past the re-send bound: the lane now decides by reading
        async with StreamRunner.from_repository(admin, clock=clock) as runner:
            await runner.drain()  # the crossing (60 %) is read during the outage: held
            await asyncio.sleep(1.0)
            await proxy.set_mode("pass")
            await repo.close(timeout=30)  # the decision and the refund land
            stats = repo.get_cache_stats()
            await runner.drain()
            assert runner.aggregator.held.dropped == 1
            clock.advance(HOLD_MS + 1)
            await runner.drain()
    assert stats.resolved_by_read >= 1 and stats.refunded_after_deadline == 1
    assert stats.abandoned_at_close == 0
    assert await stored_alerts(admin, "u") == []
    [state] = await admin.get_buckets("u")
    assert state.total_consumed == 0
    await admin.close()


async def test_a_refund_whose_record_failed_is_read_again_before_any_later_record_of_its_item(
    table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund's record fails (dropping the crossing it took back meets a 500) and the
    stream delivers it again, with the item's later records. A later record read in the same
    batch told the sweep that nothing of the item was left to read, and the hold passed before
    the retry: the refunded crossing was stored (`make sim` seed 60, plan ci)."""
    mine, theirs, me = await refused_all_or_none(table, clock)
    async with me.acquire("u", "budget", {"weekly": 1}):
        pass  # a later write of the item (1 %: no crossing)
    async with StreamRunner.from_repository(mine, clock=clock) as runner:
        debit, refund, later = (await budget_records(runner, mine, "u"))[-3:]
        held = runner.aggregator.held
        put = held._store.put
        calls = 0

        async def fails_once(item: dict[str, Any], **kw: Any) -> None:
            nonlocal calls
            calls += item.get("ended") == "dropped"
            if calls == 1 and item.get("ended") == "dropped":
                raise UnknownOutcome(RuntimeError("injected 500"))
            await put(item, **kw)

        monkeypatch.setattr(held._store, "put", fails_once)
        first = await runner.aggregator.process([debit, refund, later])
        assert sorted(first.failures) == [1]  # the refund; Lambda resumes there
        clock.advance(HOLD_MS + 1)  # the retry comes after the hold
        assert (await held.sweep_now()).alerts_stored == 0
        again = await runner.aggregator.process([refund, later])
        assert (again.failures, again.alerts_stored, held.dropped) == ({}, 0, 1)
    assert await stored_alerts(mine, "u") == []
    for repo in (mine, theirs):
        await repo.close()


# --- a held crossing's item: late writes, and what a kept crossing reports ---------------------


def hold_writes_time_out(
    held: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[tuple[dict[str, Any], dict[str, Any]]]]:
    """Make the held crossings' writes time out in flight (sent, not landed: the invocation
    dies), kept to be landed later; returns the real `put` and the writes in flight."""
    put = held._store.put
    in_flight: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def times_out(item: dict[str, Any], **kw: Any) -> None:
        if item["PK"] != keys.HELD_CROSSINGS_PK:
            await put(item, **kw)
            return
        in_flight.append((item, kw))
        raise UnknownOutcome(TimeoutError("the invocation timed out"))

    monkeypatch.setattr(held._store, "put", times_out)
    return put, in_flight


async def test_a_late_write_cannot_hold_a_dropped_crossing_again(
    table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An invocation holds the crossing, and times out with that write in flight; the retry
    holds it and drops it (the refund); then the first invocation's write lands. Unconditional,
    it held the dropped crossing again, and the item's next write after the hold stored the
    alert the refund had taken back (reference §5.20)."""
    mine, theirs, me = await refused_all_or_none(table, clock)
    clock.advance(HOLD_MS + ASSUMED_SKEW_MS + 1)
    async with me.acquire("u", "budget", {"weekly": 1}):
        pass  # the item's next write (1 %: no crossing), after the crossing's hold
    async with StreamRunner.from_repository(mine, clock=clock) as runner:
        debit, refund, later = (await budget_records(runner, mine, "u"))[-3:]
        held = runner.aggregator.held
        put, in_flight = hold_writes_time_out(held, monkeypatch)
        assert sorted((await runner.aggregator.process([debit])).failures) == [0]
        monkeypatch.undo()
        retried = await runner.aggregator.process([debit, refund])  # the retry: held, dropped
        assert (retried.failures, held.dropped) == ({}, 1)
        [(item, kw)] = in_flight
        with contextlib.suppress(ConditionFailed):
            await put(item, **kw)  # the first invocation's write lands now
        assert (await runner.aggregator.process([later])).alerts_stored == 0
        assert (await held.sweep_now()).alerts_stored == 0
    assert await stored_alerts(mine, "u") == []
    for repo in (mine, theirs):
        await repo.close()


async def test_a_late_write_cannot_move_a_held_crossings_last_write_seen_back(
    table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crossing that stays, then two more writes of its item. An invocation records the first
    (the item's write count it saw) and times out with that write in flight; the retry records
    both; then the first invocation's write lands. Unconditional, it moved the count back: the
    sweep, finding the item's count ahead of it, waited for a record that never came, and the
    alert was never stored."""
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    repo = await open_at(table, clock)
    await repo.set_resource_defaults("budget", [REFUNDED_WEEKLY])
    limiter = RateLimiter(repo)
    for amount in (60, 1, 1):
        await spend(limiter, "u", "budget", weekly=amount)
    async with StreamRunner.from_repository(repo, clock=clock) as runner:
        debit, second, third = (await budget_records(runner, repo, "u"))[-3:]
        held = runner.aggregator.held
        assert (await runner.aggregator.process([debit])).failures == {}
        put, in_flight = hold_writes_time_out(held, monkeypatch)
        assert sorted((await runner.aggregator.process([second])).failures) == [0]
        monkeypatch.undo()
        assert (await runner.aggregator.process([second, third])).failures == {}
        [(item, kw)] = in_flight
        with contextlib.suppress(ConditionFailed):
            await put(item, **kw)  # the first invocation's write lands now
        clock.advance(HOLD_MS + 1)
        assert (await held.sweep_now()).alerts_stored == 1
    assert await stored_alerts(repo, "u") == [(50, 60)]
    await repo.close()


async def test_a_crossing_a_refund_keeps_reports_the_level_that_stayed(
    table: TableRef, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """u: another process keeps 20 % and, while a refused call's debit of 40 % (the crossing:
    60 %) waits for its refund, 35 % more; the refund leaves 55 %, all kept: the alert reports
    the refund's time and 55, not the crossing write's 60 (which held the refunded debit).
    v: the crossing write (60 %, kept) held no debit the refund took back (a refused 10 % after
    it): the alert keeps that write's time and use."""
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    mine, theirs = await open_at(table, clock), await open_at(table, clock)
    await mine.set_resource_defaults("budget", [REFUNDED_WEEKLY])
    await mine.set_resource_defaults("search", [Limit.per_day("rpm", 2)])
    me, them = RateLimiter(mine), RateLimiter(theirs)
    for entity, kept in (("u", 20), ("v", 60)):
        async with me.acquire(entity, "search", {"rpm": 1}):
            pass  # warm: this process sees one unit of search left
        async with me.acquire(entity, "budget", {"weekly": 1}) as lease:
            await lease.adjust(weekly=-1)
        async with them.acquire(entity, "search", {"rpm": 1}):
            pass  # the last unit, unseen by `mine`
        await spend(them, entity, "budget", weekly=kept)
    send = mine._store.send_update
    budget_u = keys.bucket(mine.namespace_id, "u", "budget")["PK"]

    async def another_debit_meanwhile(request: dict[str, Any]) -> dict[str, Any]:
        wire = await send(request)
        if request["Key"]["PK"]["S"] == budget_u and not meanwhile:
            meanwhile.append(1)
            clock.advance(seconds=1)
            await spend(them, "u", "budget", weekly=35)  # 95 %
            clock.advance(seconds=1)  # the refund: 55 %
        return wire

    meanwhile: list[int] = []
    monkeypatch.setattr(mine._store, "send_update", another_debit_meanwhile)
    for entity, refused in (("u", 40), ("v", 10)):
        clock.advance(seconds=1)
        with pytest.raises(RateLimitExceeded):
            async with me.acquire(
                entity, "search", {"rpm": 1}, also={"budget": {"weekly": refused}}
            ):
                pass
    monkeypatch.undo()
    assert meanwhile == [1]
    async with StreamRunner.from_repository(mine, clock=clock) as runner:
        await runner.drain()
        clock.advance(HOLD_MS + 1)
        await runner.drain()
    for entity, expected in (
        ("u", (50, 55, "2026-01-06T09:00:03Z")),
        ("v", (50, 60, "2026-01-06T09:00:00Z")),
    ):
        alerts, _ = await mine.get_alerts(entity)
        assert [(a.threshold, a.used, a.crossed_at) for a in alerts] == [expected]
    for repo in (mine, theirs):
        await repo.close()
