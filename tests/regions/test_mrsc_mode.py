"""MRSC mode (docs/multi-region.md): on a table with multi-Region strong consistency the library
sends no transaction; every multi-item change is written one item at a time with the same
meaning (all or none, exactly once), and a split keeps every unit."""

from __future__ import annotations

from typing import Any

import pytest
from region_support import MrscTable, stop_a_split_half_way, stop_after

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.errors import EntityExistsError, ValidationError
from zae_limiter.models import AuditAction


async def test_the_table_is_detected_and_admin_changes_send_no_transaction(
    mrsc: MrscTable,
) -> None:
    repo = await mrsc.open("us-east-2")
    assert repo.scope.store.multi_region is not None
    assert repo.scope.store.multi_region.regions == ("us-east-1", "us-east-2", "us-west-2")
    assert repo.scope.store.multi_region.local == "us-east-2"
    limiter = RateLimiter(repo)
    await repo.set_system_defaults([Limit.per_minute("rpm", 100)])
    await repo.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    await repo.create_entity("org")
    await repo.create_entity("user-1", parent_id="org", cascade=True)
    with pytest.raises(EntityExistsError):
        await repo.create_entity("user-1")
    with pytest.raises(ValidationError):
        await repo.create_entity("user-2", parent_id="user-1")  # the parent is not a root
    assert await repo.get_entity("user-2") is None  # nothing of the refused change was written
    await repo.set_limits("user-1", [Limit.per_minute("rpm", 5)], "api")
    async with limiter.acquire("user-1", "api", {"rpm": 1}):
        pass
    assert (await repo.top_up("user-1", "api", {"rpm": 1})).shards == 1
    await repo.disable_entity("user-1")
    await repo.enable_entity("user-1")
    await repo.create_entity("user-3")
    await repo.set_parent("user-3", "org")
    assert (await repo.get_entity("user-3")).parent_id == "org"
    other = await repo.register_namespace("other")
    assert await repo.register_namespace("other") == other  # idempotent
    await repo.delete_namespace("other")
    assert await repo.recover_namespace(other) == "other"
    await repo.delete_namespace("other")
    await repo.purge_namespace(other)
    await repo.delete_entity("user-3")
    events = await repo.get_audit_events("user-1")
    actions = {event.action for event in events}
    assert {AuditAction.ENTITY_CREATED, AuditAction.LIMITS_SET} <= actions
    assert mrsc.sim.total("transaction") == 0


async def test_a_split_one_item_at_a_time_neither_mints_nor_loses_a_unit(
    mrsc: MrscTable,
) -> None:
    repo = await mrsc.open("us-west-2")
    limiter = RateLimiter(repo)
    limits = [Limit.quota("jobs", 1_000, cron="0 0 * * *"), Limit.per_minute("rpm", 600)]
    await limiter.set_resource_defaults("api", limits)
    for _ in range(3):
        async with limiter.acquire("org", "api", {"jobs": 11, "rpm": 5}):
            pass
    assert await repo.set_shards("org", "api", 8) == 8
    states = await repo.get_buckets("org", "api")
    assert {state.shard_id for state in states} == set(range(8))
    available = (await limiter.check_availability("org", "api")).available
    assert available == {"jobs": 1_000 - 33, "rpm": 600 - 15}
    assert mrsc.sim.total("transaction") == 0
    stored = [item for item in await _bucket_items(repo, "org", "api") if "sp" in item]
    assert stored == []  # every split's record was removed once its new shard was created


async def test_a_split_stopped_half_way_is_finished_by_the_next_writer(
    mrsc: MrscTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open("us-east-1")
    await stop_a_split_half_way(repo, monkeypatch)
    items = await _bucket_items(repo, "org", "api")
    assert [(item["sh"], item["sc"], "sp" in item) for item in items] == [(0, 2, True)]
    other = RateLimiter(await mrsc.open("us-east-1"))  # another process, the new layout
    admitted = 0
    for _ in range(80):  # more than the allowance: every unit is found once, none twice
        try:
            async with other.acquire("org", "api", {"jobs": 1}):
                admitted += 1
        except Exception:
            pass
    assert admitted == 60
    items = await _bucket_items(repo, "org", "api")
    assert sorted((item["sh"], "sp" in item) for item in items) == [(0, False), (1, False)]
    assert mrsc.sim.total("transaction") == 0


async def _bucket_items(repo: Repository, entity: str, resource: str) -> list[dict[str, Any]]:
    from zae_limiter.dynamo import keys

    store = repo.scope.store
    found = []
    for shard in range(32):
        item = await store.get(keys.bucket(repo.namespace_id, entity, resource, shard))
        if item is not None:
            found.append(item)
    return found


async def test_top_up_and_reset_on_every_shard_one_at_a_time_are_exact_and_replayed(
    mrsc: MrscTable,
) -> None:
    repo = await mrsc.open("us-east-2")
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 100, cron="0 0 * * *")])
    await repo.set_shards("acme", "api", 4)
    async with limiter.acquire("acme", "api", {"jobs": 10}):
        pass
    first = await repo.top_up("acme", "api", {"jobs": 21}, idempotency_key="order-1")
    assert (first.shards, first.amounts, first.replayed) == (4, {"jobs": 21}, False)
    again = await repo.top_up("acme", "api", {"jobs": 21}, idempotency_key="order-1")
    assert (again.amounts, again.replayed) == ({"jobs": 21}, True)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 111}
    reset = await repo.reset_bucket("acme", "api")
    assert reset.amounts == {"jobs": 10}
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 121}
    assert mrsc.sim.total("transaction") == 0


async def test_a_top_up_stopped_half_way_is_finished_once_by_its_retry(
    mrsc: MrscTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zae_limiter.admin.balance_writes import BalanceWrites

    repo = await mrsc.open("us-west-2")
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 100, cron="0 0 * * *")])
    await repo.set_shards("acme", "api", 4)
    write_shard = stop_after(monkeypatch, BalanceWrites, "_shard", 2)
    with pytest.raises(RuntimeError, match="stopped"):
        await repo.top_up("acme", "api", {"jobs": 40}, idempotency_key="order-2")
    monkeypatch.setattr(BalanceWrites, "_shard", write_shard)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 120}
    finished = await repo.top_up("acme", "api", {"jobs": 40}, idempotency_key="order-2")
    assert (finished.amounts, finished.replayed) == ({"jobs": 40}, True)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}
    replayed = await repo.top_up("acme", "api", {"jobs": 40}, idempotency_key="order-2")
    assert (replayed.amounts, replayed.replayed) == ({"jobs": 40}, True)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}


async def test_a_limits_manifest_applies_without_a_transaction(mrsc: MrscTable) -> None:
    from zae_limiter.manifest.apply import apply_plan, plan_manifest
    from zae_limiter.manifest.parse import loads

    repo = await mrsc.open("us-east-1")
    manifest = loads(
        "namespace: default\n"
        "resources:\n"
        "  search:\n"
        "    cascade: true\n"
        "    limits: {requests: {capacity: 60}}\n"
        "entities:\n"
        "  org-acme:\n"
        "    resources:\n"
        "      search: {limits: {requests: {capacity: 600}}, shards: 4}\n"
    )
    await apply_plan(repo, manifest, await plan_manifest(repo, manifest))
    again = await plan_manifest(repo, manifest)
    assert not again.changes  # applied in full: nothing left to change
    assert (await repo.get_buckets("org-acme", "search"))[0].shard_count == 4
    assert mrsc.sim.total("transaction") == 0
