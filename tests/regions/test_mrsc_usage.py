"""The aggregator on a table without transactions (usage/snapshot_writes.py): every record is
counted exactly once in its snapshots, through redeliveries, a delivery stopped half way, and a
deleted entity, and no transaction is sent."""

from __future__ import annotations

from typing import Any

import pytest
from region_support import MrscTable

from zae_limiter import Limit, RateLimiter
from zae_limiter.dynamo import transport
from zae_limiter.local.stream_runner import StreamRunner


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


async def _ledger_batch(limiter: RateLimiter, runner: StreamRunner) -> list[dict[str, Any]]:
    """Three users' acquires (one refunded); their stream records, unprocessed."""
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("rpm", 100), Limit.per_minute("tpm", 10_000)]
    )
    for i, user in enumerate(("user-1", "user-2", "user-3")):
        consume = {"rpm": 1, "tpm": 10 * (i + 1)}
        async with limiter.acquire(user, "search", consume=consume) as lease:
            await lease.adjust(tpm=1)
    with pytest.raises(RuntimeError):
        async with limiter.acquire("user-2", "search", consume={"rpm": 1}):
            raise RuntimeError("refund")
    return [record for event in await runner.poll() for record in event["Records"]]


async def _assert_users(limiter: RateLimiter) -> None:
    for i, user in enumerate(("user-1", "user-2", "user-3")):
        for window_type in ("hourly", "daily"):
            found, _ = await limiter.get_usage_snapshots(
                entity_id=user, resource="search", window_type=window_type
            )
            assert [(s.counters, s.total_events) for s in found] == [
                ({"rpm": 1, "tpm": 10 * (i + 1) + 1}, 1)
            ]


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
        batch_put = store.batch_put

        async def stops(items: Any) -> None:
            raise RuntimeError("the aggregator stopped after writing the snapshots")

        monkeypatch.setattr(store, "batch_put", stops)
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
