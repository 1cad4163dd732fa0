"""Writes whose response is lost after they landed are applied exactly once (docs/contributing.md).

The hook sends the real request to DynamoDB Local itself, then raises a read timeout, so the
library sees exactly what botocore sees when a response is lost: a write that may have applied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ReadTimeoutError

from zae_limiter import Limit, RateLimiter, Repository


def _text_headers(headers: Any) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in headers.items()
    }


class LoseResponses:
    """Let the next `count` matching UpdateItems land, then pretend their responses were lost
    (after awaiting `between()`, if given: other writers acting before the re-send)."""

    def __init__(
        self,
        repo: Repository,
        count: int = 1,
        between: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.client = repo.transport.client
        self.count = count
        self.between = between
        self.lost = 0

    async def hook(self, request: Any, **_: Any) -> Any:
        if self.lost >= self.count:
            return None
        self.lost += 1
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                request.url, data=request.body, headers=_text_headers(request.headers)
            ) as response,
        ):
            await response.read()  # applied (or refused by its guard); the answer is lost
        if self.between is not None:
            await self.between()
        raise ReadTimeoutError(endpoint_url=request.url)

    def __enter__(self) -> LoseResponses:
        self.client.meta.events.register(
            "before-send.dynamodb.UpdateItem", self.hook, unique_id="lose"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.meta.events.unregister("before-send.dynamodb.UpdateItem", unique_id="lose")


async def setup(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    async with limiter.acquire("u", "api", {"units": 1}):  # warm: the item exists
        pass


async def test_a_lost_admission_response_debits_once(
    limiter: RateLimiter, repo: Repository
) -> None:
    await setup(limiter)
    with LoseResponses(repo) as lose:
        async with limiter.acquire("u", "api", {"units": 100}):
            pass
    assert lose.lost == 1
    [state] = await repo.get_buckets("u")
    assert (state.tokens, state.total_consumed) == (899, 101)


async def test_a_lost_reconcile_response_adjusts_once(
    limiter: RateLimiter, repo: Repository
) -> None:
    await setup(limiter)
    async with limiter.acquire("u", "api", {"units": 100}) as lease:
        await lease.adjust(units=50)
        with LoseResponses(repo) as lose:
            pass
    assert lose.lost == 0
    acquisition = limiter.acquire("u", "api", {"units": 100})
    lease = await acquisition.__aenter__()
    await lease.adjust(units=50)
    with LoseResponses(repo) as lose:
        await acquisition.__aexit__(None, None, None)
    assert lose.lost == 1
    [state] = await repo.get_buckets("u")
    assert state.total_consumed == 1 + 150 + 150


async def test_a_lost_refund_response_refunds_once(limiter: RateLimiter, repo: Repository) -> None:
    await setup(limiter)
    acquisition = limiter.acquire("u", "api", {"units": 100})
    await acquisition.__aenter__()
    with LoseResponses(repo) as lose:
        await acquisition.__aexit__(RuntimeError, RuntimeError("failed work"), None)
    assert lose.lost == 1
    [state] = await repo.get_buckets("u")
    assert (state.tokens, state.total_consumed) == (999, 1)


async def test_a_lost_first_write_creates_the_bucket_once(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    with LoseResponses(repo) as lose:
        async with limiter.acquire("new-user", "api", {"units": 10}):
            pass
    assert lose.lost == 1
    [state] = await repo.get_buckets("new-user")
    assert (state.tokens, state.total_consumed) == (990, 10)


@pytest.mark.parametrize("lost", [2, 3])
async def test_repeated_losses_still_apply_once(
    limiter: RateLimiter, repo: Repository, lost: int
) -> None:
    await setup(limiter)
    with LoseResponses(repo, count=lost):
        async with limiter.acquire("u", "api", {"units": 100}):
            pass
    [state] = await repo.get_buckets("u")
    assert state.total_consumed == 101
