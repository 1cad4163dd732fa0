"""Fixtures for the multi-Region tests: `sim` (three simulated Regions of an MRSC global table
over this module's DynamoDB Local, tests/support/regions.py) and `mrsc` (a fresh table made
through it, with `open(region)` for a Repository in one of its Regions)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from region_support import MrscTable

from support.clock import FakeClock
from support.regions import Regions, regions
from support.tables import delete_table_quietly, unique_table_name
from zae_limiter import Repository

#: Latency in tests: a tenth of the default round trips (0.2 ms local, 1.5-7 ms between Regions).
TEST_SCALE = 0.1


@pytest.fixture
async def sim(ddb_endpoint: str) -> AsyncIterator[Regions]:
    async with regions(ddb_endpoint, seed=47, scale=TEST_SCALE) as table:
        yield table


@pytest.fixture
async def mrsc(sim: Regions, ddb_client: Any, clock: FakeClock) -> AsyncIterator[MrscTable]:
    name = unique_table_name("mrsc")
    first = sim.names[0]
    await Repository.create_table(table=name, endpoint_url=sim.url(first), region=first)
    table = MrscTable(name, sim, clock)
    try:
        yield table
    finally:
        for repo in table.opened:
            await repo.close()
        await delete_table_quietly(ddb_client, name)
