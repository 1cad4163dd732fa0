"""The sync facade: same names and signatures as the async API, same behaviour (docs/sync.md)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from support.clock import FakeClock
from support.tables import TableRef
from zae_limiter import (
    Lease,
    Limit,
    RateLimiter,
    RateLimitExceeded,
    Repository,
    SyncLease,
    SyncRateLimiter,
    SyncRepository,
)
from zae_limiter.lease import LeaseResource
from zae_limiter.sync_lease import SyncLeaseResource
from zae_limiter.syncgen import public_signatures

PAIRS = [
    (RateLimiter, SyncRateLimiter),
    (Repository, SyncRepository),
    (Lease, SyncLease),
    (LeaseResource, SyncLeaseResource),
]


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS)
def test_every_public_member_has_the_same_signature(async_cls: type, sync_cls: type) -> None:
    assert public_signatures(sync_cls) == public_signatures(async_cls)


def test_sync_methods_are_not_coroutines() -> None:
    for _, sync_cls in PAIRS:
        for name, member in inspect.getmembers(sync_cls):
            assert not inspect.iscoroutinefunction(member), name


class AsyncApi:
    """The behaviour tests below, driven through the async API."""

    def __init__(self, table: TableRef, clock: FakeClock) -> None:
        self.table, self.clock = table, clock

    def run(self, scenario: Any) -> Any:
        async def go() -> Any:
            repo = await Repository.open(
                table=self.table.name, endpoint_url=self.table.endpoint_url, clock=self.clock
            )
            try:
                return await scenario(RateLimiter(repo), awaitable=True)
            finally:
                await repo.close()

        return asyncio.run(go())


class SyncApi:
    def __init__(self, table: TableRef, clock: FakeClock) -> None:
        self.table, self.clock = table, clock

    def run(self, scenario: Any) -> Any:
        repo = SyncRepository.open(
            table=self.table.name, endpoint_url=self.table.endpoint_url, clock=self.clock
        )
        try:
            return asyncio.run(scenario(SyncRateLimiter(repo), awaitable=False))
        finally:
            repo.close()


async def maybe(value: Any, awaitable: bool) -> Any:
    return await value if awaitable else value


async def admit_adjust_reject(limiter: Any, *, awaitable: bool) -> tuple[Any, ...]:
    await maybe(limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 100)]), awaitable)
    if awaitable:
        async with limiter.acquire("u", "api", {"tokens": 60}) as lease:
            await lease.adjust(tokens=10)
            consumed = lease.consumed
    else:
        with limiter.acquire("u", "api", {"tokens": 60}) as lease:
            lease.adjust(tokens=10)
            consumed = lease.consumed
    try:
        if awaitable:
            async with limiter.acquire("u", "api", {"tokens": 60}):
                pass
        else:
            with limiter.acquire("u", "api", {"tokens": 60}):
                pass
        rejected = False
    except RateLimitExceeded:
        rejected = True
    available = await maybe(limiter.available("u", "api"), awaitable)
    return consumed, rejected, available


@pytest.mark.parametrize("api", [AsyncApi, SyncApi])
def test_the_same_behaviour_through_both_apis(table: TableRef, clock: FakeClock, api: Any) -> None:
    # the fixture's clock stands still: no token drips back between the calls, however slow
    result = api(table, clock).run(admit_adjust_reject)
    assert result == ({"tokens": 70}, True, {"tokens": 30})


def test_a_sync_limiter_is_safe_to_share_between_threads(table: TableRef) -> None:
    repo = SyncRepository.open(table=table.name, endpoint_url=table.endpoint_url)
    limiter = SyncRateLimiter(repo)
    limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 20)])
    admitted: list[int] = []

    def work() -> None:
        for _ in range(10):
            try:
                with limiter.acquire("u", "api", {"rpm": 1}):
                    admitted.append(1)
            except RateLimitExceeded:
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) <= 20
    assert limiter.available("u", "api") == {"rpm": 20 - len(admitted)}
    repo.close()
