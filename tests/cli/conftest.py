"""Fixtures for the command-line tests: `zl` runs `zae-limiter` through click's CliRunner
against a fresh DynamoDB Local table (see cli_support.ZL); `live` is a Repository on that table
with the real clock (the CLI's clock), for reading results back through the Python API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from cli_support import ZL
from click.testing import CliRunner

from support.tables import TableRef
from zae_limiter import Repository


@pytest.fixture
def zl(table: TableRef) -> ZL:
    return ZL(table, CliRunner())


@pytest.fixture
async def live(table: TableRef) -> AsyncIterator[Repository]:
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, config_cache_ttl=0
    )
    yield repo
    await repo.close()
