"""Only consumption that stays alerts (docs/alerts.md): a debit refunded because its call was
refused all or none, or because its caller left during an outage, never causes an alert, however
late its refund reaches the aggregator; a debit that stays alerts once its hold has passed.

DynamoDB Local's stream and the local aggregator, the writers' and the aggregator's clocks one
`FakeClock`, so that holds pass when the test says. Before held crossings, each of these
refused or refunded debits stored an alert at once.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from botocore.config import Config

from support.clock import FakeClock
from support.outage import outage_proxy
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, RateLimitExceeded, Repository
from zae_limiter.alerts.held import HOLD_MS
from zae_limiter.dynamo import keys
from zae_limiter.local.stream_runner import StreamRunner

pytestmark = pytest.mark.ddb

WEEKLY = Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(50,))


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


async def test_an_all_or_none_refusal_whose_refund_comes_in_a_later_batch_never_alerts(
    table: TableRef, clock: FakeClock
) -> None:
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    mine, theirs = await open_at(table, clock), await open_at(table, clock)
    await mine.set_resource_defaults("budget", [WEEKLY])
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
    await admin.set_resource_defaults("budget", [WEEKLY])
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
