"""Root conftest: test environment and shared fixtures.

Fixtures live in tests/support/fixtures.py (see its docstring for the list): one DynamoDB Local
per session (`ddb_endpoint`), a moto server (`moto_endpoint`), clients, fresh tables (`table`,
`raw_table`, `table_name`), `clock`, `wire` and `no_backoff`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# `support` (tests/support) is importable however pytest was started.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

# Tests never reach real AWS: dummy credentials (DynamoDB Local wants an alphanumeric key id), a
# fixed region, and no profile, config file, instance metadata or endpoint from the environment.
from zae_limiter.local.engine import AMBIENT_AWS_VARIABLES, ISOLATED_AWS_ENV

os.environ.update(ISOLATED_AWS_ENV)
for _name in AMBIENT_AWS_VARIABLES:
    os.environ.pop(_name, None)

# The default acquire deadline (1 s, docs/on-unavailable.md) is for production; on a loaded test
# machine a new entity's first call can take longer and would become RateLimiterUnavailable.
# Tests of deadlines pass theirs explicitly.
os.environ.setdefault("ZAEL_ACQUIRE_TIMEOUT", "30")

pytest_plugins = ["support.fixtures", "support.leftover_tasks"]

# Hypothesis's per-example deadline (200 ms by default) is a wall-time assertion: a loaded machine
# failed test_quota_math with "took 410 ms". Tests assert counts, never time.
from hypothesis import settings  # noqa: E402

settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Spec conformance tests run only where the spec is (see support/spec.py)."""
    from support.spec import select_spec_tests

    select_spec_tests(config, items)


def pytest_sessionstart(session):  # type: ignore[no-untyped-def]
    from support.spec import require_before_workers

    require_before_workers(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # type: ignore[no-untyped-def]
    """pytest-xdist: a worker's spec tests left out reach the controller's summary line."""
    from support.spec import worker_done

    worker_done(node.config, getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    from support.spec import report

    line = report(config)
    if line:
        terminalreporter.write_line(line, yellow=True)


# --- library fixtures -------------------------------------------------------------------------

from support.clock import FakeClock  # noqa: E402
from support.tables import TableRef  # noqa: E402
from zae_limiter import RateLimiter, Repository  # noqa: E402


@pytest.fixture
async def open_repo(table: TableRef, clock: FakeClock):  # type: ignore[no-untyped-def]
    """Factory: another Repository on the same table (another process, as far as caches go)."""
    opened: list[Repository] = []

    async def make(**kwargs):  # type: ignore[no-untyped-def]
        kwargs.setdefault("clock", clock)
        repo = await Repository.open(
            table=table.name, endpoint_url=table.endpoint_url, region=table.region, **kwargs
        )
        opened.append(repo)
        return repo

    yield make
    for repo in opened:
        await repo.close()


@pytest.fixture
async def repo(table: TableRef, clock: FakeClock):  # type: ignore[no-untyped-def]
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    yield repo
    await repo.close()


@pytest.fixture
async def limiter(repo: Repository) -> RateLimiter:
    return RateLimiter(repo)
