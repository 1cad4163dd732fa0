"""Fixtures for the multi-Region tests: `sim` (three simulated Regions of an MRSC global table
over DynamoDB Local, tests/support/regions.py) and `mrsc` (a fresh table made through it, with
`open(region)` for a Repository in one of its Regions).

These tests write little (a few tables of a few items each), so they share one DynamoDB Local
for the whole directory instead of one per module (support/fixtures.py, ENGINE_SCOPE): 4 JVM
starts fewer."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from region_support import MrscTable

from support.clock import FakeClock
from support.fixtures import EXTERNAL_ENDPOINT_ENV
from support.regions import Regions, regions
from support.tables import delete_table_quietly, unique_table_name
from zae_limiter import Repository
from zae_limiter.local import RunningEngine, start_engine

#: Latency in tests: a tenth of the default round trips (0.2 ms local, 1.5-7 ms between Regions).
TEST_SCALE = 0.1


@pytest.fixture(scope="package")
def ddb_local() -> Iterator[RunningEngine | None]:
    if os.environ.get(EXTERNAL_ENDPOINT_ENV):
        yield None
        return
    engine = start_engine(engine="dynamodb-local")
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="package")
def ddb_endpoint(ddb_local: RunningEngine | None) -> Iterator[str]:
    yield ddb_local.endpoint_url if ddb_local else os.environ[EXTERNAL_ENDPOINT_ENV]


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
