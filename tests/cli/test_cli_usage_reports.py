"""`usage list` newest first with a cursor; `usage summary` counts each debit once (docs/cli.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from cli_support import ZL

from support.clock import FakeClock
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.local.stream_runner import StreamRunner

#: The hour the module started in, read once: a test that read the clock again could straddle an
#: hour's edge and expect windows an hour apart from the ones it wrote.
THIS_HOUR = datetime.fromtimestamp(time.time(), UTC).replace(minute=0, second=0, microsecond=0)


def _hour(ago: int) -> datetime:
    return (THIS_HOUR - timedelta(hours=ago)).replace(tzinfo=None)


async def test_list_shows_the_newest_window_with_a_next_key(zl: ZL, table: TableRef) -> None:
    clock = FakeClock()
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    try:
        limiter = RateLimiter(repo)
        await limiter.set_resource_defaults("search", [Limit.per_minute("requests", 60)])
        for ago in (2, 1):
            clock.set_datetime(_hour(ago) + timedelta(minutes=30))
            async with limiter.acquire("user-1", "search", {"requests": 1}):
                pass
        async with StreamRunner.from_repository(repo) as runner:
            await runner.drain()
    finally:
        await repo.close()
    newest, older = (f"{_hour(ago):%Y-%m-%dT%H}:00:00Z" for ago in (1, 2))
    args = ("usage", "list", "-e", "user-1", "-r", "search", "-w", "hourly")
    page = zl.json(*args, "-l", "1")
    assert [s["window_start"] for s in page["snapshots"]] == [newest]
    assert page["next_key"]
    text = zl(*args, "-l", "1").stdout
    assert newest in text and older not in text
    assert f"continue with --next-key {page['next_key']}" in text
    rest = zl.json(*args, "-l", "1", "--next-key", page["next_key"])
    assert [s["window_start"] for s in rest["snapshots"]] == [older]
    assert rest["next_key"] is None


async def test_summary_prints_whole_numbers_and_says_how_it_counts(
    zl: ZL, live: Repository
) -> None:
    zl("resource", "set-defaults", "search", "-l", "units:10000000")
    zl("resource", "set-cascade", "search", "on")
    zl("entity", "create", "org-acme")
    zl("entity", "set-limits", "org-acme", "-r", "search", "-l", "units:100000000/day")
    zl("entity", "create", "user-5", "--parent", "org-acme")
    async with RateLimiter(live).acquire("user-5", "search", {"units": 1_619_220}):
        pass
    async with StreamRunner.from_repository(live) as runner:
        await runner.drain()
    text = zl("usage", "summary", "-r", "search").stdout
    assert "each debit once" in text
    [row] = [line.split() for line in text.splitlines() if line.startswith("units")]
    assert row == ["units", "1619220", "1619220", "1619220"]  # total, cascaded, average
    assert "e+06" not in text
    assert zl.json("usage", "summary", "-r", "search")["total"] == {"units": 1_619_220}
