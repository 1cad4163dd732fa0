"""The audit log: one event per administrative call, atomically with it (docs/audit.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from support.clock import FakeClock
from zae_limiter import AuditAction, AuditEvent, Limit, Repository, ResourceDisabled
from zae_limiter.audit import DEFAULT_RETENTION_DAYS
from zae_limiter.dynamo import keys

WEEKLY = Limit.quota("weekly", 1_000, cron="0 0 * * 1")
Call = Callable[[Repository], Awaitable[Any]]

# (call, subject whose log gets the event, action, expected details subset)
CALLS: list[tuple[str, Call, str, str, dict[str, Any]]] = [
    (
        "create_entity",
        lambda r: r.create_entity("org-1", name="Org", metadata={"tier": "gold"}),
        "org-1",
        AuditAction.ENTITY_CREATED,
        {"name": "Org", "parent_id": None, "metadata": {"tier": "gold"}},
    ),
    (
        "create_child",
        lambda r: r.create_entity("u1", parent_id="org-1"),
        "u1",
        AuditAction.ENTITY_CREATED,
        {"parent_id": "org-1"},
    ),
    (
        "set_limits",
        lambda r: r.set_limits("u1", [WEEKLY], resource="budget"),
        "u1",
        AuditAction.LIMITS_SET,
        {"limits": [{"name": "weekly", **WEEKLY.to_dict()}]},
    ),
    (
        "top_up",
        lambda r: r.top_up("u1", "budget", {"weekly": 5}, idempotency_key="order-7"),
        "u1",
        AuditAction.BUCKET_TOPPED_UP,
        {
            "limits": ["weekly"],
            "amounts": {"weekly": 5},
            "requested": {"weekly": 5},
            "shards": 1,
            "idempotency_key": "order-7",
        },
    ),
    (
        "reset_bucket",
        lambda r: r.reset_bucket("u1", "budget", limits=["weekly"]),
        "u1",
        AuditAction.BUCKET_RESET,
        {"limits": ["weekly"], "amounts": {"weekly": 0}, "shards": 1, "idempotency_key": None},
    ),
    (
        "disable_entity",
        lambda r: r.disable_entity("u1", resource="budget"),
        "u1",
        AuditAction.LIMITS_SET,
        {"kind": "disabled", "disabled": True},
    ),
    (
        "set_entity_cascade",
        lambda r: r.set_entity_cascade("u1", True, resource="search"),
        "u1",
        AuditAction.LIMITS_SET,
        {"kind": "cascade", "cascade": True},
    ),
    (
        "set_parent",
        lambda r: r.set_parent("u1", None),
        "u1",
        AuditAction.ENTITY_PARENT_CHANGED,
        {"old": "org-1", "new": None},
    ),
    (
        "delete_limits",
        lambda r: r.delete_limits("u1", resource="budget"),
        "u1",
        AuditAction.LIMITS_DELETED,
        {"limits": None},
    ),
    (
        "set_resource_defaults",
        lambda r: r.set_resource_defaults("budget", [WEEKLY]),
        "$RESOURCE:budget",
        AuditAction.LIMITS_SET,
        {"limits": [{"name": "weekly", **WEEKLY.to_dict()}]},
    ),
    (
        "set_resource_cascade",
        lambda r: r.set_resource_cascade("search", False),
        "$RESOURCE:search",
        AuditAction.LIMITS_SET,
        {"kind": "cascade", "cascade": False},
    ),
    (
        "delete_resource_defaults",
        lambda r: r.delete_resource_defaults("budget"),
        "$RESOURCE:budget",
        AuditAction.LIMITS_DELETED,
        {"limits": None},
    ),
    (
        "set_system_defaults",
        lambda r: r.set_system_defaults([Limit.per_minute("rpm", 10)]),
        "$SYSTEM",
        AuditAction.LIMITS_SET,
        {"limits": [{"name": "rpm", **Limit.per_minute("rpm", 10).to_dict()}]},
    ),
    (
        "delete_entity",
        lambda r: r.delete_entity("u1"),
        "u1",
        AuditAction.ENTITY_DELETED,
        {},
    ),
]


async def all_events(repo: Repository, subjects: set[str]) -> dict[str, list[AuditEvent]]:
    return {s: await repo.get_audit_events(s) for s in subjects}


async def test_every_administrative_call_leaves_exactly_one_event(
    repo: Repository, clock: FakeClock
) -> None:
    subjects = {subject for _, _, subject, _, _ in CALLS}
    for name, call, subject, action, details in CALLS:
        clock.advance(1_000)
        before = await all_events(repo, subjects)
        await call(repo)
        after = await all_events(repo, subjects)
        new = {s: after[s][: len(after[s]) - len(before[s])] for s in subjects}
        assert {s: len(e) for s, e in new.items() if e} == {subject: 1}, name
        [event] = new[subject]
        assert (event.action, event.entity_id) == (action, subject), name
        assert details.items() <= event.details.items(), (name, event.details)
        assert event.timestamp.endswith("Z") and event.principal is None, name
        if subject.startswith("$"):
            assert event.resource == subject.partition(":")[2] or subject == "$SYSTEM"


async def test_a_replayed_or_refused_call_leaves_no_event(
    repo: Repository, clock: FakeClock
) -> None:
    await repo.set_resource_defaults("budget", [WEEKLY])
    await repo.create_entity("u1")
    await repo.top_up("u1", "budget", {"weekly": 5}, idempotency_key="order-1")
    clock.advance(1_000)
    assert (await repo.top_up("u1", "budget", {"weekly": 5}, idempotency_key="order-1")).replayed
    with pytest.raises(ValueError):
        await repo.top_up("u1", "budget", {"monthly": 5})
    with pytest.raises(ValueError):
        await repo.top_up("u1", "budget", {"weekly": 6}, idempotency_key="order-1")
    actions = sorted(e.action for e in await repo.get_audit_events("u1"))
    assert actions == [AuditAction.BUCKET_TOPPED_UP, AuditAction.ENTITY_CREATED]


async def test_a_supplied_principal_is_recorded(repo: Repository) -> None:
    await repo.set_resource_defaults("budget", [WEEKLY])
    for entity in ("u1", "u2"):
        await repo.create_entity(entity)
    await repo.top_up("u1", "budget", {"weekly": 5}, principal="support:alice")
    await repo.reset_bucket("u2", "budget", principal="support:bob")
    [topped] = [e for e in await repo.get_audit_events("u1") if e.action != "entity_created"]
    [reset] = [e for e in await repo.get_audit_events("u2") if e.action != "entity_created"]
    assert (topped.principal, reset.principal) == ("support:alice", "support:bob")
    assert (topped.resource, reset.details["shards"]) == ("budget", 0)


async def test_events_are_newest_first_with_an_exclusive_cursor_and_a_retention_ttl(
    repo: Repository, clock: FakeClock
) -> None:
    await repo.set_resource_defaults("api", [Limit.per_day("units", 100)])
    await repo.create_entity("u1")
    for _ in range(5):
        clock.advance(1_000)
        await repo.reset_bucket("u1", "api")
    events = await repo.get_audit_events("u1")
    ids = [e.event_id for e in events]
    assert ids == sorted(ids, reverse=True) and len(ids) == 6  # five resets, one creation
    assert [e.timestamp for e in events] == sorted((e.timestamp for e in events), reverse=True)
    page = await repo.get_audit_events("u1", limit=2, start_event_id=ids[1])
    assert [e.event_id for e in page] == ids[2:4]
    raw = await repo._store.get(keys.audit_event(repo.namespace_id, "u1", ids[0]))
    assert raw is not None
    assert raw["ttl"] == clock.now_ms // 1000 + DEFAULT_RETENTION_DAYS * 86_400


async def test_a_refused_top_up_leaves_neither_a_change_nor_an_event(repo: Repository) -> None:
    await repo.set_resource_defaults(
        "budget", [Limit.quota("session", 10, reset_after=timedelta(hours=5))]
    )
    await repo.create_entity("u1")
    await repo.disable_entity("u1", resource="budget")
    with pytest.raises(ResourceDisabled):
        await repo.top_up("u1", "budget", {"session": 1})
    assert sorted(e.action for e in await repo.get_audit_events("u1")) == [
        AuditAction.ENTITY_CREATED,
        AuditAction.LIMITS_SET,
    ]
    assert await repo.get_buckets("u1") == []


async def test_an_audited_concurrency_limit_says_what_it_is(repo: Repository) -> None:
    parallel = Limit.concurrent("parallel", 4, lease_ttl=timedelta(seconds=30))
    await repo.set_resource_defaults("llm", [Limit.per_minute("requests", 60), parallel])
    [event] = await repo.get_audit_events("$RESOURCE:llm")
    assert event.details["limits"][1] == {
        "name": "parallel",
        "capacity": 4,
        "concurrent": True,
        "lease_ttl_seconds": 30,
    }
    stored = [Limit.from_dict(d.pop("name"), d) for d in event.details["limits"]]
    assert stored == [Limit.per_minute("requests", 60), parallel]
