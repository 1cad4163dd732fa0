"""Namespaces, entities and bucket expiry (docs/getting-started.md,
docs/reset-and-top-up.md, docs/configuration.md, docs/limits-and-time.md)."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import (
    EntityExistsError,
    InfrastructureNotFoundError,
    Limit,
    NamespaceNotFoundError,
    NamespaceStateError,
    RateLimiter,
    Repository,
    TableRecreatedError,
    ValidationError,
)


async def test_namespaces_isolate_everything(repo: Repository) -> None:
    other_id = await repo.register_namespace("tenant-b")
    assert await repo.register_namespace("tenant-b") == other_id  # idempotent
    other = await repo.namespace("tenant-b")
    assert other.namespace_id == other_id != repo.namespace_id
    for scope in (repo, other):
        await RateLimiter(scope).set_resource_defaults("api", [Limit.per_minute("rpm", 5)])
    async with RateLimiter(repo).acquire("u", "api", {"rpm": 5}):
        pass
    assert await RateLimiter(other).available("u", "api") == {"rpm": 5}
    await other.create_entity("u")
    assert await repo.get_entity("u") is None
    names = {n["name"] for n in await repo.list_namespaces()}
    assert names == {"default", "tenant-b"}


async def test_soft_delete_recover_and_purge(repo: Repository, table: Any, clock: Any) -> None:
    ns_id = await repo.register_namespace("gone")
    scope = await repo.namespace("gone")
    await RateLimiter(scope).set_resource_defaults("api", [Limit.per_minute("rpm", 5)])
    async with RateLimiter(scope).acquire("u", "api", {"rpm": 1}):
        pass
    with pytest.raises(NamespaceStateError):
        await repo.purge_namespace(ns_id)  # still active
    await repo.delete_namespace("gone")
    with pytest.raises(NamespaceNotFoundError):
        await Repository.open("gone", table=table.name, endpoint_url=table.endpoint_url)
    assert [n["id"] for n in await repo.list_orphan_namespaces()] == [ns_id]
    assert await repo.recover_namespace(ns_id) == "gone"
    recovered = await Repository.open(
        "gone", table=table.name, endpoint_url=table.endpoint_url, clock=clock
    )
    assert await RateLimiter(recovered).available("u", "api") == {"rpm": 4}  # data stayed
    await recovered.close()
    await repo.delete_namespace("gone")
    await repo.purge_namespace(ns_id)
    assert await repo.list_orphan_namespaces() == []
    new_id = await repo.register_namespace("gone")
    fresh = await repo.namespace("gone")
    assert new_id != ns_id and await fresh.get_resource_defaults("api") == []


async def test_open_refuses_what_does_not_exist(ddb_endpoint: str) -> None:
    with pytest.raises(InfrastructureNotFoundError, match="zae-limiter local up"):
        await Repository.open(table="no-such-table", endpoint_url=ddb_endpoint)


async def test_entities(limiter: RateLimiter, repo: Repository) -> None:
    entity = await limiter.create_entity(
        "org", name="Acme", metadata={"plan": "pro"}, cascade=False
    )
    assert entity.is_parent and entity.metadata == {"plan": "pro"}
    with pytest.raises(EntityExistsError):
        await limiter.create_entity("org")
    child = await limiter.create_entity("user-1", parent_id="org")
    assert child.is_child
    with pytest.raises(ValidationError, match="children"):
        await limiter.delete_entity("org")
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 5)])
    async with limiter.acquire("user-1", "api", {"rpm": 1}):
        pass
    await limiter.set_limits("user-1", [Limit.per_minute("rpm", 9)], resource="api")
    await limiter.delete_entity("user-1")
    assert await limiter.get_entity("user-1") is None
    assert await repo.get_buckets("user-1") == []
    assert await limiter.get_limits("user-1", resource="api") == []
    await limiter.delete_entity("org")
    assert await limiter.get_children("org") == []


async def test_an_expired_bucket_is_treated_as_absent(open_repo: Any, clock: Any) -> None:
    repo = await open_repo(bucket_ttl_multiplier=1)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 60)])
    async with limiter.acquire("u", "api", {"rpm": 60}):
        pass
    [before] = await repo.get_buckets("u")
    clock.advance(minutes=6)  # past the item's ttl (at least 5 min: MIN_EXPIRY_MS); never deleted
    async with limiter.acquire("u", "api", {"rpm": 10}):
        pass
    [after] = await repo.get_buckets("u")
    assert before.total_consumed == 60 and after.total_consumed == 10  # a fresh generation
    assert after.tokens == 50


async def test_a_table_created_again_under_a_running_process_fails_loudly(
    repo: Repository, open_repo: Any, table: Any, clock: Any, ddb_client: Any, wire: Any
) -> None:
    """An in-memory engine stopped and `local up` again makes a new table under the old name,
    with another version record and another `default` id. A process still running fails with
    `TableRecreatedError` where the evidence arrives (a live item gone, config it saw gone, a
    resource with no limits), writes nothing, and pays nothing for the check on the warm path."""
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 100)])
    idle = await open_repo()  # another process: opened, nothing read yet
    for entity in ("user-1", "user-2"):
        async with limiter.acquire(entity, "search", {"rpm": 1}):
            pass
    async with wire.block() as warm, limiter.acquire("user-1", "search", {"rpm": 1}):
        pass
    assert warm.by_operation == {"UpdateItem": 1}  # the debit alone: no identity read
    opened = (await repo.get_version_record() or {})["table_id"]
    await repo.set_version_record(aggregator_version=None)  # rewrites the record, keeps the id
    assert (await repo.get_version_record() or {})["table_id"] == opened

    await Repository.delete_table(table=table.name, endpoint_url=table.endpoint_url)
    await Repository.create_table(table=table.name, endpoint_url=table.endpoint_url)

    with pytest.raises(TableRecreatedError) as warm_item_gone:
        async with limiter.acquire("user-1", "search", {"rpm": 1}):
            pass
    error = warm_item_gone.value
    assert (error.table_name, error.namespace_name, error.opened) == (table.name, "default", opened)
    assert error.found is not None and error.found != opened
    assert "was deleted and created again" in str(error) and "Open the repository again" in str(
        error
    )
    clock.advance(seconds=61)  # the config cache lapsed: a cold entity reads config, finds it gone
    with pytest.raises(TableRecreatedError):
        async with limiter.acquire("user-9", "search", {"rpm": 1}):
            pass
    with pytest.raises(TableRecreatedError):  # no config ever read: no limits, which is evidence
        async with RateLimiter(idle).acquire("user-1", "search", {"rpm": 1}):
            pass
    page = await ddb_client.scan(TableName=table.name, ConsistentRead=True)
    assert not [i for i in page["Items"] if i["PK"]["S"].startswith(repo.namespace_id)]

    fresh = await open_repo()  # the new table, opened again: no false alarm
    async with RateLimiter(fresh).acquire("user-1", "search", {"rpm": 1}):
        pass  # unmetered in the new table, admitted
