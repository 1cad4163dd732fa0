"""The Locust user class (zae_limiter.integrations.locust_user) under gevent, on DynamoDB Local.

Locust monkey-patches the process with gevent when imported, so it runs in a subprocess
(`locust --headless`), never in the test process. Checked by counts: every acquire Locust
reports as a success is debited exactly once (the buckets' consumption equals it), none fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.local.engine import ISOLATED_AWS_ENV

pytestmark = pytest.mark.ddb

USERS = 4
LOCUSTFILE = """
from zae_limiter.integrations.locust_user import LimiterUser

class ApiUser(LimiterUser):
    table = {table!r}
    endpoint_url = {endpoint!r}
    region = {region!r}
    resource = "api"
    consume = {{"t": 1}}
    entity_prefix = "lc-"
"""


def run_locust(tmp_path: Path, table: TableRef, endpoint: str) -> subprocess.CompletedProcess[str]:
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(
        LOCUSTFILE.format(table=table.name, endpoint=endpoint, region=table.region)
    )
    locust = Path(sys.executable).with_name("locust")
    env = {**os.environ, **ISOLATED_AWS_ENV}
    return subprocess.run(
        [
            str(locust),
            "-f",
            str(locustfile),
            "--headless",
            "-u",
            str(USERS),
            "-r",
            str(USERS),
            "-t",
            "10s",
            "--stop-timeout",
            "10",
            "--json",
            "--only-summary",
            "--loglevel",
            "WARNING",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_every_reported_acquire_is_debited_once(tmp_path: Path, table: TableRef) -> None:
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    try:
        await RateLimiter(repo).set_resource_defaults("api", [Limit.per_minute("t", 10**9)])
        done = run_locust(tmp_path, table, table.endpoint_url)
        assert done.returncode == 0, done.stderr[-2000:]
        [stats] = [s for s in json.loads(done.stdout) if s["name"] == "api"]
        # What is checked is a count, not a speed: each user's first acquire (opening the table on
        # a cold engine) may take most of the run on a loaded machine, so any number of acquires
        # from one on is fine; every one of them must be debited exactly once, none may fail.
        assert stats["num_requests"] >= 1 and stats["num_failures"] == 0
        consumed = 0
        for n in range(USERS):
            for state in await repo.get_buckets(f"lc-{n}", "api"):
                consumed += state.total_consumed
        assert consumed == stats["num_requests"]  # whole units, one per acquire
    finally:
        await repo.close()


async def test_a_remote_endpoint_is_refused(tmp_path: Path, table: TableRef) -> None:
    done = run_locust(tmp_path, table, "https://dynamodb.us-east-1.amazonaws.com")
    assert "not on this machine" in done.stderr
    stats = json.loads(done.stdout) if done.stdout.strip() else []
    assert not [s for s in stats if s["num_requests"]]
