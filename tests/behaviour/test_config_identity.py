"""A limit is identified by its name: a schedule edit never refills a quota (docs/quotas.md).

Resource defaults `weekly` 5,000,000 on Mondays in Paris; a user spends 4,900,000; then the same
limit is stored again with its cron respelled, its zone moved to one with the same offset, its
capacity raised, or a real schedule change. The period's balance and top-ups are kept to the
unit, a second 4,900,000 in the same week is rejected, and only the next edge moves.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from support.clock import FakeClock
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
ALLOWANCE = 5_000_000
SPENT = 4_900_000


def utc_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def weekly(capacity: int = ALLOWANCE, cron: str = "0 0 * * 1", tz: str = "Europe/Paris") -> Limit:
    return Limit.quota("weekly", capacity, cron=cron, tz=tz)


async def spend(limiter: RateLimiter, amount: int, entity: str = "user-1") -> None:
    async with limiter.acquire(entity, "budget", {"weekly": amount}):
        pass


async def weekly_left(limiter: RateLimiter, entity: str = "user-1") -> int:
    return (await limiter.available(entity, "budget"))["weekly"]


@pytest.fixture
async def spent(limiter: RateLimiter, clock: FakeClock) -> RateLimiter:
    clock.set(utc_ms("2026-01-07T12:00:00"))  # a Wednesday, mid-week in Paris
    await limiter.set_resource_defaults("budget", [weekly()])
    await spend(limiter, SPENT)
    assert await weekly_left(limiter) == ALLOWANCE - SPENT
    clock.advance(minutes=5)
    return limiter


@pytest.mark.parametrize(
    "edited",
    [
        weekly(cron="0 0 * * MON"),  # respelled
        weekly(cron="0 0 * * mon"),
        weekly(tz="Europe/Berlin"),  # another zone, same offset
        weekly(capacity=6_000_000, cron="0 0 * * MON"),  # raised together with a respelling
    ],
    ids=["MON", "mon", "berlin", "raised"],
)
async def test_a_cosmetic_schedule_edit_keeps_this_weeks_spend(
    spent: RateLimiter, edited: Limit
) -> None:
    limiter = spent
    await limiter.set_resource_defaults("budget", [edited])
    await spend(limiter, 1)  # the next call restamps the bucket under the edited limit
    left = ALLOWANCE - SPENT - 1
    assert await weekly_left(limiter) == left
    with pytest.raises(RateLimitExceeded) as info:
        await spend(limiter, SPENT)
    status = info.value.violations[0]
    assert (status.limit_name, status.available) == ("weekly", left)
    assert status.resets_at_ms == utc_ms("2026-01-11T23:00:00")  # Monday 00:00 Paris/Berlin


async def test_an_entity_zone_change_keeps_the_spend_and_the_top_up(
    limiter: RateLimiter, repo: Repository, clock: FakeClock
) -> None:
    clock.set(utc_ms("2026-01-07T12:00:00"))
    await limiter.set_limits("org-1", [weekly()], resource="budget")
    await spend(limiter, SPENT, "org-1")
    await repo.top_up("org-1", "budget", {"weekly": 2_000_000})
    await limiter.set_limits("org-1", [weekly(tz="Europe/Berlin")], resource="budget")
    assert await weekly_left(limiter, "org-1") == ALLOWANCE - SPENT + 2_000_000
    await spend(limiter, 2_000_000, "org-1")
    with pytest.raises(RateLimitExceeded):
        await spend(limiter, 100_001, "org-1")


async def test_a_real_schedule_change_keeps_the_balance_and_moves_only_the_next_edge(
    spent: RateLimiter, clock: FakeClock
) -> None:
    limiter = spent
    # Mondays -> Thursdays: Thursday 00:00 Paris lies ahead; Monday's edge is not replayed, and
    # neither is the new schedule's own last edge (Thursday 1 January, before the change).
    await limiter.set_resource_defaults("budget", [weekly(cron="0 0 * * THU")])
    status = (await limiter.check_availability("user-1", "budget")).status("weekly")
    assert (status.available, status.resets_at_ms) == (
        ALLOWANCE - SPENT,
        utc_ms("2026-01-07T23:00:00"),
    )
    with pytest.raises(RateLimitExceeded):
        await spend(limiter, SPENT)
    clock.set(utc_ms("2026-01-07T23:00:00"))  # the new edge resets it
    await spend(limiter, ALLOWANCE)


async def test_an_edge_of_the_new_schedule_after_the_change_applies_on_a_later_touch(
    spent: RateLimiter, clock: FakeClock
) -> None:
    limiter = spent
    await limiter.set_resource_defaults("budget", [weekly(cron="0 0 * * THU")])
    clock.set(utc_ms("2026-01-09T10:00:00"))  # Friday: Thursday's new edge passed while idle
    await spend(limiter, ALLOWANCE)  # a fresh allowance from the new schedule's edge
    with pytest.raises(RateLimitExceeded):
        await spend(limiter, 1)
