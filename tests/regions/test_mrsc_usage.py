"""The aggregator on a table without transactions (usage/snapshot_writes.py): every record is
counted exactly once in its snapshots, through redeliveries, a delivery stopped half way, and a
deleted entity, and no transaction is sent."""

from __future__ import annotations

import pytest
from region_support import MrscTable, stop_after

from aggregator.test_usage_aggregation import _assert_users, _ledger_batch
from zae_limiter import RateLimiter
from zae_limiter.dynamo import transport
from zae_limiter.local.stream_runner import StreamRunner


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


async def test_every_record_counts_once_through_redeliveries_without_a_transaction(
    mrsc: MrscTable,
) -> None:
    repo = await mrsc.open("us-east-2")
    limiter = RateLimiter(repo)
    async with StreamRunner.from_repository(repo) as runner:
        assert runner.aggregator.store.sequential
        records = await _ledger_batch(limiter, runner)
        first = await runner.aggregator.process(records)
        assert not first.failures and first.applied == 8
        again = await runner.aggregator.process(records)
        assert (again.applied, again.duplicates, again.failures) == (0, 8, {})
        await _assert_users(limiter)
    assert mrsc.sim.total("transaction") == 0


async def test_a_delivery_stopped_half_way_is_counted_once_when_redelivered(
    mrsc: MrscTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open("us-west-2")
    limiter = RateLimiter(repo)
    async with StreamRunner.from_repository(repo) as runner:
        records = await _ledger_batch(limiter, runner)
        store = runner.aggregator.store
        batch_put = stop_after(monkeypatch, store, "batch_put", 0)  # after the snapshots
        stopped = await runner.aggregator.process(records)
        assert stopped.failures  # reported for retry: Lambda delivers them again
        monkeypatch.setattr(store, "batch_put", batch_put)
        again = await runner.aggregator.process(records)
        assert not again.failures
        await _assert_users(limiter)
        snapshots = await store.query_all(f"{repo.namespace_id}#U#user-1", consistent=True)
        assert all(not any(k.startswith("@") for k in s) for s in snapshots)  # entries removed


async def test_the_records_of_a_deleted_entity_are_dropped(mrsc: MrscTable) -> None:
    repo = await mrsc.open("us-east-1")
    limiter = RateLimiter(repo)
    async with StreamRunner.from_repository(repo) as runner:
        records = await _ledger_batch(limiter, runner)
        await repo.delete_entity("user-3")
        outcome = await runner.aggregator.process(records)
        assert outcome.ignored >= 2 and not outcome.failures
        found, _ = await limiter.get_usage_snapshots(entity_id="user-3", resource="search")
        assert found == []
