"""Helpers of the multi-Region tests (tests/regions/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from support.clock import FakeClock
from support.regions import Regions
from zae_limiter import Repository


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
