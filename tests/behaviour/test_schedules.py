"""Schedule entries (docs/limits-and-time.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository, ScheduleEntry
from zae_limiter.core import schedule
from zae_limiter.core.bucket import MILLI


def at(clock: Any, text: str) -> None:
    clock.set(int(datetime.fromisoformat(text).astimezone(UTC).timestamp() * 1000))


OFFICE = ScheduleEntry(cron="* 9-17 * * MON-FRI", tz="Europe/Paris", scale=2.0)


def test_the_first_matching_entry_wins_and_scale_multiplies_capacity_and_refill() -> None:
    entries = schedule.encode(
        [
            ScheduleEntry(cron="* 12 * * *", capacity=500).to_dict(),
            OFFICE.to_dict(),
        ]
    )
    noon = int(datetime(2026, 1, 5, 12, 30, tzinfo=UTC).timestamp() * 1000)  # both match
    ten = int(datetime(2026, 1, 5, 9, 0, tzinfo=UTC).timestamp() * 1000)  # 10:00 Paris
    night = int(datetime(2026, 1, 5, 22, 0, tzinfo=UTC).timestamp() * 1000)
    assert [schedule.active(entries, t) for t in (noon, ten, night)] == [0, 1, -1]
    base = (100 * MILLI, 100 * MILLI, 60_000)
    assert schedule.effective(base, entries, 1, quota=False) == (200 * MILLI, 200 * MILLI, 60_000)
    assert schedule.effective(base, entries, 0, quota=False) == (500 * MILLI, 100 * MILLI, 60_000)
    assert schedule.effective(base, entries, 1, quota=True) == (200 * MILLI, 0, 60_000)


async def test_office_hours_double_the_limit(limiter: RateLimiter, clock: Any) -> None:
    await limiter.set_resource_defaults(
        "api", [Limit.per_minute("rpm", 10).with_schedule((OFFICE,))]
    )
    at(clock, "2026-01-05T10:00:00+01:00")  # Monday 10:00 in Paris
    availability = await limiter.check_availability("u", "api")
    assert availability.status("rpm").limit.capacity == 20
    for _ in range(20):
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    at(clock, "2026-01-05T22:00:00+01:00")  # evening: the base 10/min, refilled to its ceiling
    for _ in range(10):
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u", "api", {"rpm": 1}):
            pass
    assert info.value.violations[0].limit.capacity == 10


async def test_an_entry_ending_cuts_the_balance_to_the_lower_ceiling(
    limiter: RateLimiter, clock: Any
) -> None:
    await limiter.set_resource_defaults(
        "api", [Limit.per_hour("units", 100).with_schedule((OFFICE,))]
    )
    at(clock, "2026-01-05T17:59:00+01:00")
    async with limiter.acquire("u", "api", {"units": 50}):
        pass  # 150 of 200 left
    at(clock, "2026-01-05T18:00:00+01:00")
    assert (await limiter.available("u", "api")) == {"units": 100}  # cut to the base ceiling
    async with limiter.acquire("u", "api", {"units": 100}):
        pass
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("u", "api", {"units": 1}):
            pass


async def test_a_scaled_quota_keeps_its_balance_across_entries(
    limiter: RateLimiter, clock: Any
) -> None:
    weekend = ScheduleEntry(cron="* * * * SAT,SUN", scale=0.5)
    await limiter.set_resource_defaults(
        "budget", [Limit.quota("weekly", 1_000, cron="0 0 * * 1").with_schedule((weekend,))]
    )
    at(clock, "2026-01-09T12:00:00+00:00")  # Friday
    async with limiter.acquire("u", "budget", {"weekly": 300}):
        pass
    at(clock, "2026-01-10T12:00:00+00:00")  # Saturday: ceiling 500, 700 left is cut to 500
    assert (await limiter.available("u", "budget")) == {"weekly": 500}
    async with limiter.acquire("u", "budget", {"weekly": 100}):
        pass
    at(clock, "2026-01-12T00:00:00+00:00")  # Monday: the reset gives the full base allowance
    assert (await limiter.available("u", "budget")) == {"weekly": 1_000}


async def test_retry_after_walks_into_the_next_entry(limiter: RateLimiter, clock: Any) -> None:
    """docs/limits-and-time.md: each entry's rate applies while it is in force."""
    await limiter.set_resource_defaults(
        "api",
        [Limit.per_hour("units", 60).with_schedule((OFFICE,))],  # 1/min; 2/min from 09:00
    )
    at(clock, "2026-01-05T08:59:30+01:00")
    async with limiter.acquire("u", "api", {"units": 60}):
        pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u", "api", {"units": 2}):
            pass
    # half a unit by 09:00 at 1/min, the other 1.5 at 2/min: 30 s + 45 s (not 120 s)
    assert info.value.retry_after_seconds == 75.001
    clock.advance(75_001)
    async with limiter.acquire("u", "api", {"units": 2}):
        pass


async def test_availability_after_an_edge_follows_each_entrys_rate(
    limiter: RateLimiter, repo: Repository, clock: Any
) -> None:
    """Read before any write after the edge: what the next acquire will find."""
    await limiter.set_resource_defaults(
        "api",
        [Limit.per_hour("units", 60).with_schedule((OFFICE,))],  # 1/min; 2/min from 09:00
    )
    at(clock, "2026-01-05T08:59:30+01:00")
    async with limiter.acquire("u", "api", {"units": 60}):
        pass
    at(clock, "2026-01-05T09:01:00+01:00")
    assert await limiter.available("u", "api") == {"units": 2}  # 0.5 at 1/min + 2 at 2/min
    (stored,) = await repo.get_buckets("u", "api")
    assert (stored.tokens, stored.capacity, stored.refill_amount) == (2, 120, 120)
    async with limiter.acquire("u", "api", {"units": 2}):
        pass


async def test_a_bucket_idle_through_a_whole_entry_earns_that_entrys_rate(
    limiter: RateLimiter, clock: Any
) -> None:
    """Out and back: the entry in force is the stamped one again, the balance still walks."""
    await limiter.set_resource_defaults(
        "api",
        [Limit.per_day("units", 1440).with_schedule((OFFICE,))],  # 1/min; 2/min 09-18
    )
    at(clock, "2026-01-05T08:00:00+01:00")
    async with limiter.acquire("u", "api", {"units": 1440}):
        pass
    at(clock, "2026-01-05T18:30:00+01:00")
    # 60 by 09:00, +1080 at 2/min until 18:00 (under the 2880 ceiling), +30 since
    assert await limiter.available("u", "api") == {"units": 1170}
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("u", "api", {"units": 1171}):
            pass
    async with limiter.acquire("u", "api", {"units": 1170}):
        pass
