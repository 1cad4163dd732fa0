"""The sweeper (admin/sweeper.py) on a table without TTL or transactions: it removes exactly
what TTL would have (archiving audit events), and finishes changes stopped half way."""

from __future__ import annotations

import pytest
from region_support import MrscTable, stop_after

from zae_limiter import Limit, RateLimiter
from zae_limiter.admin.balance_writes import BalanceWrites
from zae_limiter.dynamo import keys, sequenced


async def test_what_ttl_would_remove_is_removed_and_audit_events_archived_first(
    mrsc: MrscTable,
) -> None:
    repo = await mrsc.open("us-east-1")
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    await repo.set_shards("split", "api", 2)  # a split bucket's items never expire
    async with limiter.acquire("idle", "api", {"rpm": 1}):  # expires in minutes
        pass
    await repo.top_up("idle", "api", {"rpm": 1}, idempotency_key="order-1")  # 3 days
    archived: list[tuple[str, bytes]] = []

    async def archive(key: str, body: bytes) -> None:
        archived.append((key, body))

    from zae_limiter.admin.sweeper import Sweeper

    sweeper = Sweeper(repo.scope.store, mrsc.clock, archive=archive)
    first = await sweeper.sweep()
    assert (first.deleted, first.archived) == (0, 0)  # nothing has expired yet
    mrsc.clock.advance(days=91)  # past every retention: audit 90 days, operation records 3
    report = await sweeper.sweep()
    store = repo.scope.store
    ns = repo.namespace_id
    assert await store.get(keys.bucket(ns, "idle", "api")) is None
    assert await store.get(keys.operation_record(ns, "order-1")) is None
    assert await store.get(keys.bucket(ns, "split", "api", 1)) is not None
    events = await repo.get_audit_events("idle")
    assert events == []
    assert report.archived >= 2 and len(archived) == 1  # top-up and sharding events, one object
    assert archived[0][0].startswith("audit/year=")
    again = await sweeper.sweep()
    assert (again.deleted, again.archived) == (0, 0)
    assert mrsc.sim.total("transaction") == 0


async def test_a_top_up_without_a_key_stopped_half_way_is_finished_by_the_sweeper(
    mrsc: MrscTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open("us-east-2")
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 100, cron="0 0 * * *")])
    await repo.set_shards("acme", "api", 4)
    write_shard = stop_after(monkeypatch, BalanceWrites, "_shard", 1)
    with pytest.raises(RuntimeError, match="stopped"):
        await repo.top_up("acme", "api", {"jobs": 40})
    monkeypatch.setattr(BalanceWrites, "_shard", write_shard)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 110}
    assert (await repo.sweep()).operations_finished == 0  # too recent: it may still be running
    mrsc.clock.advance(seconds=sequenced.RESUME_AFTER_MS / 1000 + 1)
    assert (await repo.sweep()).operations_finished == 1
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}
    assert (await repo.sweep()).operations_finished == 0  # finished once
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}


async def test_a_change_stopped_after_its_decision_is_rolled_forward_and_one_before_dropped(
    mrsc: MrscTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open("us-west-2")
    apply = stop_after(monkeypatch, sequenced, "_apply", 1)  # the entity record (the decision)
    with pytest.raises(Exception, match="stopped"):
        await repo.create_entity("org-1")  # the record lands; version and audit do not
    stop_after(monkeypatch, sequenced, "_apply", 0)
    with pytest.raises(Exception, match="stopped"):
        await repo.create_entity("org-2")  # nothing lands (its journal entry does)
    monkeypatch.setattr(sequenced, "_apply", apply)
    assert await repo.get_entity("org-1") is not None
    assert await repo.get_audit_events("org-1") == []
    mrsc.clock.advance(seconds=sequenced.RESUME_AFTER_MS / 1000 + 1)
    report = await repo.sweep()
    assert (report.changes_finished, report.changes_dropped) == (1, 1)
    assert [event.action for event in await repo.get_audit_events("org-1")] == ["entity_created"]
    assert await repo.get_entity("org-2") is None
    journal = await repo.scope.store.query_all(sequenced.JOURNAL_PK, consistent=True)
    assert journal == []
