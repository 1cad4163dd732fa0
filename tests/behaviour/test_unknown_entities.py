"""A mistyped customer id never buys credit or looks disabled (docs/reset-and-top-up.md).

An entity with neither a record nor a bucket item is unknown: `top_up`, `reset_bucket`,
`bypass_entity` and `disable_entity` raise `EntityNotFoundError` and write nothing. A created
entity, or one an acquire has met, is known; `acquire` and `set_limits` keep accepting ids that
were never created.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from zae_limiter import EntityNotFoundError, Limit, RateLimiter, Repository
from zae_limiter.dynamo import keys

WEEKLY = Limit.quota("weekly", 1_000, cron="0 0 * * 1")


async def items_in_table(repo: Repository) -> int:
    rows = await repo._store.query_all(repo.namespace_id, index=keys.GSI4)
    return len(rows)


OPERATIONS: dict[str, Callable[[Repository, str], Awaitable[Any]]] = {
    "top_up": lambda repo, e: repo.top_up(e, "budget", {"weekly": 5}),
    "reset_bucket": lambda repo, e: repo.reset_bucket(e, "budget"),
    "bypass_entity": lambda repo, e: repo.bypass_entity(e),
    "disable_entity": lambda repo, e: repo.disable_entity(e, resource="budget"),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_an_unknown_entity_is_refused_and_nothing_is_written(
    repo: Repository, operation: str
) -> None:
    await repo.set_resource_defaults("budget", [WEEKLY])
    await repo.set_limits("ghost-user", [WEEKLY], resource="budget")  # config alone: unknown
    before = await items_in_table(repo)
    with pytest.raises(EntityNotFoundError) as info:
        await OPERATIONS[operation](repo, "ghost-user")
    assert info.value.entity_id == "ghost-user"
    assert await items_in_table(repo) == before
    assert [e.action for e in await repo.get_audit_events("ghost-user")] == ["limits_set"]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_an_entity_met_by_an_acquire_or_created_is_known(
    repo: Repository, limiter: RateLimiter, operation: str
) -> None:
    await repo.set_resource_defaults("budget", [WEEKLY])
    async with limiter.acquire("api-key-1", "budget", {"weekly": 1}):
        pass
    await repo.create_entity("user-3")
    await OPERATIONS[operation](repo, "api-key-1")
    await OPERATIONS[operation](repo, "user-3")
