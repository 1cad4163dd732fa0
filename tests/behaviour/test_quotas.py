"""Calendar and session quotas with a moved clock (docs/limits-and-time.md, docs/quotas.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from support.clock import FakeClock
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, ScheduleEntry

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def utc_ms(year: int, month: int, day: int, hour: int) -> int:
    return round(datetime(year, month, day, hour, tzinfo=UTC).timestamp() * 1000)


async def spend(limiter: RateLimiter, resource: str, **amounts: int) -> None:
    async with limiter.acquire("u1", resource, amounts):
        pass


async def rejection(limiter: RateLimiter, resource: str, **amounts: int) -> RateLimitExceeded:
    with pytest.raises(RateLimitExceeded) as info:
        await spend(limiter, resource, **amounts)
    return info.value


@pytest.mark.parametrize(
    ("tz", "monday_before", "monday_after"),
    [
        # spring forward on Sunday 8 March 2026: midnight moves from 05:00 to 04:00 UTC
        ("America/New_York", utc_ms(2026, 3, 2, 5), utc_ms(2026, 3, 9, 4)),
        # fall back on Sunday 25 October 2026: midnight moves from 22:00 to 23:00 UTC
        ("Europe/Paris", utc_ms(2026, 10, 18, 22), utc_ms(2026, 10, 25, 23)),
    ],
)
async def test_a_weekly_quota_resets_at_monday_midnight_in_its_zone_across_dst(
    limiter: RateLimiter, clock: FakeClock, tz: str, monday_before: int, monday_after: int
) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", tz=tz)]
    )
    clock.set(monday_before - 1)  # Sunday 23:59:59.999 local: the week before
    await spend(limiter, "budget", weekly=100)
    clock.set(monday_before)
    await spend(limiter, "budget", weekly=100)  # a fresh week
    assert monday_after - monday_before != 7 * DAY_MS  # the week had 167 or 169 hours
    clock.set(monday_after - 1)
    error = await rejection(limiter, "budget", weekly=1)
    assert error.retry_after_seconds == 0.002  # until the edge, plus 1 ms
    assert error.violations[0].resets_at_ms == monday_after
    clock.set(monday_after)
    await spend(limiter, "budget", weekly=100)


async def test_a_bucket_idle_for_three_weeks_gets_exactly_one_reset(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [Limit.quota("weekly", 1_000, cron="0 0 * * 1")])
    start = clock.now_ms  # a Monday, 00:00 UTC
    await spend(limiter, "budget", weekly=700)
    clock.set(start + 3 * 7 * DAY_MS + 5 * HOUR_MS)  # three edges passed while idle
    assert await limiter.available("u1", "budget") == {"weekly": 1_000}  # set, not added up
    await spend(limiter, "budget", weekly=400)
    status = (await limiter.check_availability("u1", "budget")).status("weekly")
    assert (status.available, status.resets_at_ms) == (600, start + 4 * 7 * DAY_MS)
    error = await rejection(limiter, "budget", weekly=601)
    assert error.violations[0].available == 600


async def test_a_calendar_edge_sets_the_balance_and_forgives_soft_debt(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("daily", 100, cron="0 0 * * *", soft=True)]
    )
    await spend(limiter, "budget", daily=250)
    assert await limiter.available("u1", "budget") == {"daily": -150}
    clock.advance(DAY_MS)
    assert await limiter.available("u1", "budget") == {"daily": 100}  # unused never carries


async def test_a_session_ends_exactly_reset_after_its_first_use(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("session", 10, reset_after=timedelta(hours=5))]
    )
    clock.advance(12_345)  # not on any grid: the session opens at the entity's own first use
    opened = clock.now_ms
    await spend(limiter, "budget", session=4)
    clock.advance(HOUR_MS)
    await spend(limiter, "budget", session=6)  # exhausted: the session does not move
    error = await rejection(limiter, "budget", session=1)
    assert error.retry_after_seconds == 4 * 3600  # until the session ends
    assert error.violations[0].resets_at_ms == opened + 5 * HOUR_MS
    clock.set(opened + 5 * HOUR_MS - 1)
    assert (await rejection(limiter, "budget", session=1)).retry_after_seconds == 0.001
    clock.set(opened + 5 * HOUR_MS)  # [start, start + 5 h): it has ended
    assert await limiter.available("u1", "budget") == {"session": 10}
    clock.set(opened + 5 * HOUR_MS + 1)  # one millisecond later, a request opens a new session
    await spend(limiter, "budget", session=3)
    status = (await limiter.check_availability("u1", "budget")).status("session")
    assert (status.available, status.resets_at_ms) == (7, opened + 10 * HOUR_MS + 1)


async def test_check_availability_never_opens_a_session(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("session", 10, reset_after=timedelta(hours=5))]
    )
    status = (await limiter.check_availability("u1", "budget")).status("session")
    assert (status.available, status.resets_at_ms) == (10, None)
    clock.advance(HOUR_MS)
    await spend(limiter, "budget", session=1)
    status = (await limiter.check_availability("u1", "budget")).status("session")
    assert status.resets_at_ms == clock.now_ms + 5 * HOUR_MS


async def test_a_session_request_larger_than_the_allowance_waits_one_session(
    limiter: RateLimiter,
) -> None:
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("session", 10, reset_after=timedelta(hours=5))]
    )
    error = await rejection(limiter, "budget", session=11)
    assert error.retry_after_seconds == 5 * 3600


async def test_a_quota_with_several_reset_schedules_resets_at_every_edge(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    twice_a_week = Limit.quota("credits", 100, cron="0 0 * * 1").with_reset_schedule(
        (ScheduleEntry.reset("0 0 * * 1"), ScheduleEntry.reset("0 12 * * THU", tz="Europe/Paris"))
    )
    await limiter.set_resource_defaults("budget", [twice_a_week])
    assert (await limiter.repository.get_resource_defaults("budget")) == [twice_a_week]
    monday = clock.now_ms  # Monday 5 January 2026, 00:00 UTC
    thursday_noon_paris = utc_ms(2026, 1, 8, 11)  # 12:00 CET
    await spend(limiter, "budget", credits=100)
    error = await rejection(limiter, "budget", credits=1)
    assert error.violations[0].resets_at_ms == thursday_noon_paris
    clock.set(thursday_noon_paris)
    await spend(limiter, "budget", credits=100)
    status = (await limiter.check_availability("u1", "budget")).status("credits")
    assert (status.available, status.resets_at_ms) == (0, monday + 7 * DAY_MS)
    clock.set(monday + 7 * DAY_MS)
    assert await limiter.available("u1", "budget") == {"credits": 100}
