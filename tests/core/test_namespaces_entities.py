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
