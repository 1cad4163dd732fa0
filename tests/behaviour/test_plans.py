"""Plans and purchases (seed page "Resources and the budget", "Plans";
docs/configuration.md, docs/reset-and-top-up.md).

The seed page's two examples run verbatim (the blocks are read from the page itself) and must
print what their comments say; the worked check of docs/reset-and-top-up.md and the plan table
are then asserted step by step with a moved clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from support.clock import FakeClock
from support.docs import CodeBlock, run_block_on_fresh_table, seed_python_blocks
from support.fixtures import REGION
from support.spec import spec_dir
from support.tables import unique_table_name
from zae_limiter import AuditAction, Limit, RateLimiter, Repository

WEEK_MS = 7 * 24 * 3_600_000
PAGE = "per-resource-limits-and-shared-budget.md"

FREE_BUDGET = [
    Limit.quota("weekly", 5_000_000, cron="0 0 * * 1"),
    Limit.quota("session", 1_000_000, reset_after=timedelta(hours=5)),
]
PRO = {
    "search": [Limit.per_minute("requests", 600), Limit.per_minute("units", 100_000)],
    "budget": [
        Limit.quota("weekly", 50_000_000, cron="0 0 * * 1"),
        Limit.quota("session", 10_000_000, reset_after=timedelta(hours=5)),
    ],
}


def seed_block(index: int) -> CodeBlock:
    path = spec_dir() / PAGE
    assert path.is_file(), f"spec page not found at {path} (set ZAEL_SPEC_DIR)"
    return seed_python_blocks(path)[index - 1]


@pytest.mark.spec
@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (1, "{'weekly': 9000, 'session': 9000}"),  # Resources and the budget
        (2, "25000000"),  # Plans
    ],
)
async def test_the_seed_pages_budget_and_plans_examples_print_their_values(
    ddb_endpoint: str, index: int, expected: str
) -> None:
    block = seed_block(index)
    run = await run_block_on_fresh_table(
        block, endpoint_url=ddb_endpoint, region=REGION, table=unique_table_name("plans")
    )
    assert not run.failures, "\n".join(run.failures)
    assert [printed for _, printed in run.printed] == [expected]


async def weekly(limiter: RateLimiter, entity: str) -> int:
    return (await limiter.available(entity, "budget"))["weekly"]


async def spend(limiter: RateLimiter, entity: str, amount: int) -> None:
    async with limiter.acquire(entity, "budget", {"weekly": amount, "session": 0}):
        pass


async def upgrade(limiter: RateLimiter, entity: str) -> None:
    for resource, limits in PRO.items():
        await limiter.set_limits(entity, limits, resource=resource)


async def downgrade(limiter: RateLimiter, entity: str) -> None:
    for resource in PRO:
        await limiter.delete_limits(entity, resource=resource)


async def test_the_worked_check_step_by_step(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", FREE_BUDGET)
    await limiter.create_entity(entity_id="user-2")
    await spend(limiter, "user-2", 1_000_000)
    await upgrade(limiter, "user-2")
    assert await weekly(limiter, "user-2") == 4_000_000  # a quota keeps this period's balance
    reset = await repo.reset_bucket("user-2", "budget")
    assert (reset.shards, reset.amounts) == (1, {"weekly": 46_000_000, "session": 9_000_000})
    assert await weekly(limiter, "user-2") == 50_000_000  # spend forgotten, pro starts today
    bought = await repo.top_up(
        "user-2", "budget", {"weekly": 20_000_000}, idempotency_key="order-1001"
    )
    assert (bought.amounts, bought.replayed) == ({"weekly": 20_000_000}, False)
    await repo.reset_bucket("user-2", "budget", limits=["session"])
    await downgrade(limiter, "user-2")
    assert await weekly(limiter, "user-2") == 25_000_000  # the free $5 plus the $20 purchase
    again = await repo.top_up(
        "user-2", "budget", {"weekly": 20_000_000}, idempotency_key="order-1001"
    )
    assert (again.amounts, again.replayed) == ({"weekly": 20_000_000}, True)
    assert await weekly(limiter, "user-2") == 25_000_000  # re-running it changed nothing
    clock.advance(WEEK_MS)
    assert await weekly(limiter, "user-2") == 5_000_000  # the purchase ends with the week
    actions = [e.action for e in reversed(await repo.get_audit_events("user-2"))]
    assert sorted(actions) == sorted(
        [
            AuditAction.ENTITY_CREATED,
            AuditAction.LIMITS_SET,
            AuditAction.LIMITS_SET,
            AuditAction.BUCKET_RESET,
            AuditAction.BUCKET_TOPPED_UP,
            AuditAction.BUCKET_RESET,
            AuditAction.LIMITS_DELETED,
            AuditAction.LIMITS_DELETED,
        ]
    )


async def test_a_downgrade_in_the_period_of_a_purchase_keeps_free_ceiling_plus_purchase(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", FREE_BUDGET)
    await upgrade(limiter, "u1")
    await spend(limiter, "u1", 10_000_000)  # $40 left on pro
    await repo.top_up("u1", "budget", {"weekly": 20_000_000}, idempotency_key="order-1")
    assert await weekly(limiter, "u1") == 60_000_000
    clock.advance(3_600_000)
    await downgrade(limiter, "u1")
    assert await weekly(limiter, "u1") == 25_000_000  # cut to free $5, the purchase on top
    await spend(limiter, "u1", 24_000_000)  # usable beyond the free plan this week
    assert await weekly(limiter, "u1") == 1_000_000
    clock.advance(WEEK_MS)
    assert await weekly(limiter, "u1") == 5_000_000  # gone at the next reset


async def test_a_downgrade_does_not_recount_spend(repo: Repository, limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("budget", FREE_BUDGET)
    await upgrade(limiter, "u1")
    await spend(limiter, "u1", 10_000_000)
    await downgrade(limiter, "u1")
    assert await weekly(limiter, "u1") == 5_000_000  # $40 left on pro becomes $5 on free


async def test_an_upgrade_raises_dripping_ceilings_at_once_and_refills_at_the_new_rate(
    limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
    )
    async with limiter.acquire("u1", "search", {"requests": 60, "units": 0}):
        pass
    await upgrade(limiter, "u1")
    assert (await limiter.available("u1", "search"))["requests"] == 0  # balance kept
    clock.advance(1_000)
    assert (await limiter.available("u1", "search"))["requests"] == 10  # 600 a minute now
    clock.advance(60_000)
    assert (await limiter.available("u1", "search"))["requests"] == 600  # the new ceiling


async def test_a_session_reset_gives_a_fresh_session_and_leaves_the_week(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", FREE_BUDGET)
    async with limiter.acquire("u1", "budget", {"weekly": 900_000, "session": 900_000}):
        pass
    result: Any = await repo.reset_bucket("u1", "budget", limits=["session"])
    assert result.amounts == {"session": 900_000}
    assert await limiter.available("u1", "budget") == {"weekly": 4_100_000, "session": 1_000_000}
