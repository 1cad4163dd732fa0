"""Fixtures of the aggregation tests: every request checked against its role's IAM policy, no
retry backoff, an in-process aggregator, and a repository on the real clock (for audit order and
the background aggregator)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from support.tables import TableRef
from zae_limiter import Repository
from zae_limiter.dynamo import transport
from zae_limiter.local.stream_runner import StreamRunner


@pytest.fixture(autouse=True)
def _iam(iam_checked: object) -> None:
    """Every request of these tests is one its role's synthesized policy allows."""


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


@pytest.fixture
async def runner(repo: Repository) -> AsyncIterator[StreamRunner]:
    async with StreamRunner.from_repository(repo) as running:
        yield running


@pytest.fixture
async def live_repo(table: TableRef) -> AsyncIterator[Repository]:
    """A repository with the system clock (event ids in call order, real stream lag)."""
    opened = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    yield opened
    await opened.close()
