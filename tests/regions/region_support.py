"""Helpers of the multi-Region tests (tests/regions/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from support.clock import FakeClock
from support.regions import Regions
from zae_limiter import Limit, RateLimiter, Repository


@dataclass
class MrscTable:
    """A table created through the simulated Regions."""

    name: str
    sim: Regions
    clock: FakeClock
    opened: list[Repository] = field(default_factory=list)

    async def open(self, region: str, **kwargs: Any) -> Repository:
        kwargs.setdefault("clock", self.clock)
        repo = await Repository.open(
            table=self.name, endpoint_url=self.sim.url(region), region=region, **kwargs
        )
        self.opened.append(repo)
        return repo


def stop_after(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: int) -> Any:
    """Make `owner.name` (an async function or method) stop its process after `calls` calls:
    the next call raises, as if the process died there. Returns the original, to put back."""
    original = getattr(owner, name)
    done = 0

    async def stopping(*args: Any, **kwargs: Any) -> Any:
        nonlocal done
        if done == calls:
            raise RuntimeError("the process stopped")
        done += 1
        return await original(*args, **kwargs)

    monkeypatch.setattr(owner, name, stopping)
    return original


async def stop_a_split_half_way(repo: Repository, monkeypatch: pytest.MonkeyPatch) -> RateLimiter:
    """`org`'s `api` bucket (a daily quota of 64 jobs, 4 used) split into 2 shards by a process
    that stopped after halving shard 0, before creating shard 1 (`SplitItems.settle_sibling`)."""
    from zae_limiter.acquire.split_items import SplitItems

    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 64, cron="0 0 * * *")])
    async with limiter.acquire("org", "api", {"jobs": 4}):
        pass
    settle = stop_after(monkeypatch, SplitItems, "settle_sibling", 0)
    with pytest.raises(Exception, match="stopped"):
        await repo.set_shards("org", "api", 2)
    monkeypatch.setattr(SplitItems, "settle_sibling", settle)
    return limiter
