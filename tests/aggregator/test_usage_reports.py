"""What operators read from usage snapshots: resource-wide totals that bill right, newest-first
listings with a cursor, and usage that a deleted entity cannot take back (docs/usage.md)."""

from __future__ import annotations

from datetime import datetime

import pytest

from support.clock import FakeClock
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.local.stream_runner import StreamRunner

pytestmark = pytest.mark.ddb


async def ledger(repo: Repository, entity_id: str, resource: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for state in await repo.get_buckets(entity_id, resource):
        totals[state.limit_name] = totals.get(state.limit_name, 0) + state.total_consumed
    return totals


async def cascading_search(limiter: RateLimiter, repo: Repository) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 600), Limit.per_minute("units", 100_000)]
    )
    await limiter.create_entity(entity_id="org-acme")
    await repo.set_resource_cascade("search", True)
    await limiter.set_limits("org-acme", [Limit.per_day("units", 10_000_000)], resource="search")


async def test_resource_wide_totals_equal_the_ledger_for_a_cascading_resource(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner
) -> None:
    await cascading_search(limiter, repo)
    consumed = {"user-5": (100, 250, 7), "user-6": (60,)}
    for user, calls in consumed.items():
        await limiter.create_entity(entity_id=user, parent_id="org-acme")
        for units in calls:
            async with limiter.acquire(user, "search", consume={"requests": 1, "units": units}):
                pass
    # the organisation's own call (not cascaded from anyone)
    async with limiter.acquire("org-acme", "search", consume={"units": 40}):
        pass
    # a call that debited nothing in the end (refunded): no snapshot for it
    await limiter.create_entity(entity_id="user-7", parent_id="org-acme")
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-7", "search", consume={"requests": 1, "units": 9}):
            raise RuntimeError("refund")
    await runner.drain()

    by_entity = {e: await ledger(repo, e, "search") for e in ("org-acme", "user-5", "user-6")}
    assert by_entity["org-acme"] == {"units": 457}  # 417 cascaded + 40 of its own
    # what was consumed: each debit once (the org's bucket holds its own 40 plus the cascade)
    assert sum(by_entity[u]["units"] for u in ("user-5", "user-6")) + 40 == 457
    everyone = await limiter.get_usage_summary(resource="search")
    assert everyone.total == {"requests": 4, "units": 457}
    assert everyone.cascaded == {"units": 417}  # reported beside, never added in
    assert everyone.snapshot_count == 3  # org, user-5, user-6; none for user-7
    assert everyone.average == {"requests": 4 / 3, "units": 457 / 3}
    org = await limiter.get_usage_summary(entity_id="org-acme", resource="search")
    assert (org.total, org.cascaded) == ({"units": 457}, {"units": 417})
    org_daily, _ = await limiter.get_usage_snapshots(
        entity_id="org-acme", resource="search", window_type="daily"
    )
    assert [(s.counters, s.cascaded) for s in org_daily] == [({"units": 457}, {"units": 417})]
    assert await limiter.get_usage_snapshots(entity_id="user-7") == ([], None)


async def test_newest_first_with_a_cursor(
    limiter: RateLimiter, runner: StreamRunner, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60)])
    for hour in (7, 8, 9):
        clock.set_datetime(datetime(2026, 1, 5, hour, 30))
        async with limiter.acquire("user-1", "search", consume={"requests": hour}):
            pass
    await runner.drain()
    first, cursor = await limiter.get_usage_snapshots(
        entity_id="user-1", resource="search", window_type="hourly", limit=1, newest_first=True
    )
    assert [s.window_start for s in first] == ["2026-01-05T09:00:00Z"] and cursor
    rest, end = await limiter.get_usage_snapshots(
        entity_id="user-1",
        resource="search",
        window_type="hourly",
        limit=5,
        next_key=cursor,
        newest_first=True,
    )
    assert [s.window_start for s in rest] == ["2026-01-05T08:00:00Z", "2026-01-05T07:00:00Z"]
    assert end is None


async def test_a_deleted_then_recreated_entity_reports_zero(
    limiter: RateLimiter, repo: Repository, runner: StreamRunner, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60)])
    await limiter.create_entity(entity_id="user-1")
    for _ in range(10):
        async with limiter.acquire("user-1", "search", consume={"requests": 1}):
            pass
    clock.advance(seconds=1)
    await limiter.delete_entity("user-1")  # its writes are still in the stream
    clock.advance(seconds=1)
    assert await runner.drain() > 0
    assert await limiter.get_usage_snapshots(entity_id="user-1") == ([], None)
    assert (await limiter.get_usage_summary(resource="search")).snapshot_count == 0

    await limiter.create_entity(entity_id="user-1")
    assert (await limiter.get_usage_summary(entity_id="user-1")).total == {}
    for _ in range(3):
        async with limiter.acquire("user-1", "search", consume={"requests": 1}):
            pass
    await runner.drain()
    summary = await limiter.get_usage_summary(entity_id="user-1", resource="search")
    assert (summary.total, summary.snapshot_count) == ({"requests": 3}, 1)


async def test_a_delete_after_the_aggregator_caught_up_leaves_nothing_either(
    limiter: RateLimiter, runner: StreamRunner, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60)])
    async with limiter.acquire("user-2", "search", consume={"requests": 4}):
        pass
    await runner.drain()
    clock.advance(seconds=1)
    await limiter.delete_entity("user-2")
    await runner.drain()
    assert await limiter.get_usage_snapshots(entity_id="user-2") == ([], None)


async def test_a_rejected_multi_resource_call_leaves_no_snapshot(
    limiter: RateLimiter, runner: StreamRunner
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60)])
    await limiter.set_resource_defaults("budget", [Limit.per_minute("spend", 10)])
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire(
            "user-4", "search", consume={"requests": 1}, also={"budget": {"spend": 11}}
        ):
            pass
    await runner.drain()
    assert await limiter.get_usage_snapshots(entity_id="user-4") == ([], None)
    summary = await limiter.get_usage_summary(resource="search")
    assert (summary.snapshot_count, summary.total) == (0, {})
