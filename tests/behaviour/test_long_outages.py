"""Outages on DynamoDB Local: the bounds a caller and an operator rely on, and outages longer
than any retry budget (docs/on-unavailable.md, "Deadlines" and "Outages of minutes").

The four bounds, each pinned by a test that fails without it: the admission deadline, the exit
deadline, the memory bound of pending work, and `close()` giving up with one structured line per
item left. Times are measured on the event loop's clock against 10 times the bound: a hang guard
that a loaded machine cannot trip, not a latency assertion. Without the bound each call waits for
the table (answers held 30 s by the proxy, or 500s for as long as the test keeps them), so it
blows through the guard by a factor of ten or more. The admission and exit cases also run at the
production default deadline of 1 s.

The long shapes (tests/support/outage_shapes.py, where `make bench` runs them at 60 s): before,
the writes that landed for refused or cancelled calls were given up after 9 lost answers ("write
outcome undecided"), so their debits stayed; a refund that met an outage was dropped once the
client's retry budget was spent, leaving concurrency slots held; and the departed debits crossed
thresholds that were alerted at once. Here every combination ends exact: nothing beyond the
ledger, no slot held, no alert, nothing undecided or left at close.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config

from support import outage_shapes
from support.outage import outage_proxy
from support.tables import TableRef
from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    Repository,
)
from zae_limiter.acquire import leftovers

GUARD = 10  # times the bound
HANG = 20  # seconds: what a call without its bound is stopped at (it would wait for the table)
TIMEOUTS = Config(connect_timeout=1, read_timeout=3)


async def opened(table: TableRef, url: str, **kwargs: Any) -> Repository:
    return await Repository.open(
        table=table.name, endpoint_url=url, region=table.region, client_config=TIMEOUTS, **kwargs
    )


async def warm(limiter: RateLimiter, entity: str = "u") -> None:
    """The entity's config read and item written (no deadline: the machine may be slow)."""
    async with limiter.acquire(entity, "api", {"units": 1}, timeout=None) as lease:
        await lease.adjust(units=-1)


@pytest.fixture
async def admin(table: TableRef) -> Any:
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    await repo.set_resource_defaults("api", [Limit.per_day("units", 1_000)])
    yield repo
    await repo.close()


async def units(admin: Repository, entity: str = "u") -> int:
    return sum(state.total_consumed for state in await admin.get_buckets(entity))


@pytest.fixture(params=[0.2, None], ids=["0.2s", "default-1s"])
def deadline(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> float | None:
    """A deadline given to `open()`, or None: the production default (the suite's conftest sets
    $ZAEL_ACQUIRE_TIMEOUT to 30 s; here it is removed, so `open()` takes 1.0 s)."""
    if request.param is None:
        monkeypatch.delenv("ZAEL_ACQUIRE_TIMEOUT", raising=False)
    return request.param  # type: ignore[no-any-return]


def bound(deadline: float | None) -> dict[str, float]:
    return {} if deadline is None else {"acquire_timeout": deadline}


async def test_an_admission_answers_within_its_deadline_while_the_table_hangs(
    table: TableRef, admin: Repository, deadline: float | None
) -> None:
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await opened(table, proxy.url, **bound(deadline))
        assert repo.scope.shared.acquire_timeout == (deadline or 1.0)
        limiter = RateLimiter(repo)
        await warm(limiter)
        await proxy.set_mode("hold")  # every write lands; its answer never comes

        async def call() -> None:
            async with limiter.acquire("u", "api", {"units": 1}):
                pass

        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(RateLimiterUnavailable):
            await asyncio.wait_for(call(), HANG)
        took = loop.time() - started
        await proxy.set_mode("pass")
        await repo.close()
    assert took < GUARD * (deadline or 1.0), took
    assert await units(admin) == 0  # what landed was refunded


async def test_a_lease_exit_returns_within_its_deadline_while_the_table_hangs(
    table: TableRef, admin: Repository, deadline: float | None
) -> None:
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await opened(table, proxy.url, **bound(deadline))
        limiter = RateLimiter(repo)
        await warm(limiter)
        loop = asyncio.get_running_loop()
        started = 0.0

        async def call() -> None:
            nonlocal started
            async with limiter.acquire("u", "api", {"units": 1}) as lease:
                await lease.adjust(units=2)  # an exit write
                await proxy.set_mode("hold")
                started = loop.time()

        await asyncio.wait_for(call(), HANG)
        took = loop.time() - started
        await proxy.set_mode("pass")
        await repo.close()  # the exit write lands off the caller's path
    assert took < GUARD * (deadline or 1.0), took
    assert await units(admin) == 3


@pytest.mark.parametrize("mode", [OnUnavailable.BLOCK, OnUnavailable.ALLOW], ids=["BLOCK", "ALLOW"])
async def test_pending_work_is_bounded_new_calls_past_it_send_nothing(
    table: TableRef, admin: Repository, mode: OnUnavailable
) -> None:
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await opened(table, proxy.url, acquire_timeout=0.2)
        repo.scope.shared.pending.limit = 3  # (10,000 in production)
        limiter = RateLimiter(repo)
        for entity in ("a", "b", "c", "d"):
            await warm(limiter, entity)
        await proxy.set_mode("hold")
        for entity in ("a", "b", "c"):  # each leaves its write pending off its path
            with pytest.raises(RateLimiterUnavailable):
                async with limiter.acquire(entity, "api", {"units": 1}):
                    pass
        assert repo.get_cache_stats().pending_resolutions == 3
        sent = proxy.requests
        if mode is OnUnavailable.BLOCK:
            with pytest.raises(RateLimiterUnavailable, match="nothing was debited"):
                async with limiter.acquire("d", "api", {"units": 1}, on_unavailable=mode):
                    pass
        else:
            async with limiter.acquire("d", "api", {"units": 1}, on_unavailable=mode) as lease:
                assert lease.degraded
        assert proxy.requests == sent  # refused without a request
        await proxy.set_mode("pass")
        await repo.close()
    assert [await units(admin, e) for e in ("a", "b", "c", "d")] == [0, 0, 0, 0]


async def test_close_gives_up_at_its_bound_with_one_line_per_item_which_settles_it(
    table: TableRef,
    admin: Repository,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZAEL_CLOSE_TIMEOUT", "0.5")  # (8 s by default)
    caplog.set_level(logging.ERROR, logger="zae_limiter")
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await opened(table, proxy.url, acquire_timeout=0.2)
        limiter = RateLimiter(repo)
        await warm(limiter)
        await warm(limiter, "v")
        await proxy.set_mode("drop")  # the writes land, their answers are lost
        for entity, amount in (("u", 4), ("v", 6)):
            with pytest.raises(RateLimiterUnavailable):
                async with limiter.acquire(entity, "api", {"units": amount}):
                    pass
        await proxy.set_mode("error500")  # then the table fails everything
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(repo.close(), HANG)
        took = loop.time() - started
        stats = repo.get_cache_stats()
        await proxy.set_mode("pass")
    assert took < GUARD * 0.5, took
    lines = [leftovers.parse(r.message) for r in caplog.records if leftovers.PREFIX in r.message]
    by_item = {line["item"].split("/")[1]: line for line in lines}
    assert sorted(by_item) == ["u", "v"] and stats.abandoned_at_close == 2
    assert by_item["u"]["undo_if_landed"] == {"units": 4}
    assert by_item["u"]["writer"] == repo.scope.admission.waves.lanes.writer
    assert isinstance(by_item["u"]["sequence"], int)
    assert (await units(admin, "u"), await units(admin, "v")) == (4, 6)  # left behind
    for line in lines:  # the recipe: settle each line once the table answers
        settled = await admin.settle_left(line)
        assert settled.landed is True and not settled.unknown and not settled.already
        assert settled.applied == {"units": -line["undo_if_landed"]["units"]}
        again = await admin.settle_left(line)  # exactly once: the second run writes nothing
        assert again.already and again.applied == {}
    assert (await units(admin, "u"), await units(admin, "v")) == (0, 0)


# --- outages longer than any retry budget --------------------------------------------------


async def test_lost_answers_then_a_20_s_outage_leave_exactly_the_ledger(
    table: TableRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers held or dropped, BLOCK and ALLOW, the single and the three-bucket call, at the
    production default deadline (1 s): then 500s for 20 s."""
    monkeypatch.delenv("ZAEL_ACQUIRE_TIMEOUT", raising=False)
    report = await outage_shapes.lost_then_outage(
        table.endpoint_url, table.name, outage_s=20, calls=6, deadline=None
    )
    outcomes = report.outcomes
    assert outcomes["admitted"] == 8  # the warm-ups; no call of the fault was admitted
    assert outcomes["refused"] + outcomes["degraded"] + outcomes["cancelled"] == 8 * 6, outcomes
    assert outcomes["cancelled"] > 0
    assert report.left == {}, report.left
    assert report.slots_held == 0
    assert report.spurious_alerts == []
    counters = report.counters
    assert counters["undecided_writes"] == 0 and counters["abandoned_at_close"] == 0
    assert counters["pending_resolutions"] == 0
    assert counters["resolved_by_read"] > 0  # re-sending kept failing for 20 s: decided by reads
    assert counters["refunded_after_deadline"] > 0


async def test_the_engine_killed_for_10_s_under_load_leaves_exactly_the_ledger(
    tmp_path: Path,
) -> None:
    """Users cascading into one organisation, a concurrency limit, a budget with thresholds,
    the aggregator running; the engine SIGKILLed (data on disk) and started again 10 s later."""
    report = await outage_shapes.engine_killed(tmp_path / "engine", down_s=10)
    assert report.outcomes["admitted"] > 0 and report.outcomes["refused"] > 0, report.outcomes
    assert report.left == {}, report.left
    assert report.extra["org_units"] == report.extra["users_units"]
    assert report.slots_held == 0
    assert report.spurious_alerts == [] and report.extra["alerts"] > 0  # the kept ones alert
    assert report.counters["undecided_writes"] == 0
    assert report.counters["abandoned_at_close"] == 0


async def test_a_hold_that_lapsed_through_an_outage_comes_back(
    table: TableRef, admin: Repository
) -> None:
    """The outage outlasts the hold's lease_ttl: its renewals failed, so the ledger counts it
    lost, but no other writer freed it. Before: the refund gave nothing back and the slot stayed
    held (found by the 60 s bench shape); now the refund removes the lapsed entry it still sees."""
    inflight = Limit.concurrent("inflight", 10, lease_ttl=timedelta(seconds=2))
    await admin.set_resource_defaults("held", [inflight])
    async with outage_proxy(table.endpoint_url) as proxy:
        repo = await opened(table, proxy.url, acquire_timeout=0.3)
        limiter = RateLimiter(repo)
        async with limiter.acquire("u", "held", {"inflight": 1}, timeout=None):
            pass
        await proxy.set_mode("drop")  # the hold is taken, the answer lost: the caller leaves
        with pytest.raises(RateLimiterUnavailable):
            async with limiter.acquire("u", "held", {"inflight": 1}):
                pass
        await proxy.set_mode("error500")
        await asyncio.sleep(3)  # past the lease_ttl
        await proxy.set_mode("pass")
        await repo.close(timeout=30)
        stats = repo.get_cache_stats()
    assert stats.refunded_after_deadline == 1 and stats.abandoned_at_close == 0
    assert (await RateLimiter(admin).available("u", "held"))["inflight"] == 10
