"""Every administrative call audited once with its principal, audit queries validated before any
request, and a change's fan-out raising only library errors (docs/audit.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from support.wire import WireRecorder
from zae_limiter import (
    FanoutIncomplete,
    Limit,
    RateLimiter,
    Repository,
    ValidationError,
    ZAELimiterError,
)

pytestmark = pytest.mark.ddb


@pytest.fixture
def repo(live_repo: Repository) -> Repository:
    return live_repo  # the system clock: event ids sort in call order


async def test_namespace_operations_write_one_event_each(repo: Repository) -> None:
    ns_id = await repo.register_namespace("tenant-a", principal="ops")
    assert await repo.register_namespace("tenant-a", principal="ops") == ns_id  # no change
    await repo.delete_namespace("tenant-a", principal="ops")
    assert await repo.recover_namespace(ns_id, principal="ops") == "tenant-a"
    await repo.delete_namespace("tenant-a", principal="ops")
    await repo.purge_namespace(ns_id, principal="irreversible-ops")
    events = await repo.get_audit_events("$NAMESPACE:tenant-a")
    assert [(e.action, e.principal) for e in reversed(events)] == [
        ("namespace_registered", "ops"),
        ("namespace_deleted", "ops"),
        ("namespace_recovered", "ops"),
        ("namespace_deleted", "ops"),
        ("namespace_purged", "irreversible-ops"),
    ]
    assert {e.details["namespace_id"] for e in events} == {ns_id}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": -1}, "limit"),
        ({"limit": 0}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"start_event_id": ""}, "start_event_id"),
        ({"start_event_id": "garbage"}, "start_event_id"),
        ({"start_event_id": 7}, "start_event_id"),
    ],
)
async def test_bad_audit_arguments_fail_before_any_request(
    repo: Repository, wire: WireRecorder, kwargs: dict[str, Any], field: str
) -> None:
    await repo.create_entity("user-1")
    with wire.block() as w, pytest.raises(ValidationError) as raised:
        await repo.get_audit_events("user-1", **kwargs)
    assert raised.value.field == field
    assert w.round_trips == 0


async def test_start_event_id_pages_through_every_event_once(repo: Repository) -> None:
    await repo.create_entity("user-1")
    for rpm in range(1, 6):
        await repo.set_limits("user-1", [Limit.per_minute("rpm", rpm)])
    everything = await repo.get_audit_events("user-1")
    assert len(everything) == 6
    paged = []
    cursor = None
    while page := await repo.get_audit_events("user-1", limit=2, start_event_id=cursor):
        paged += page
        cursor = page[-1].event_id
    assert paged == everything


async def test_96_concurrent_set_limits_raise_only_library_errors(repo: Repository) -> None:
    limiter = RateLimiter(repo)
    await repo.create_entity("user-1")
    await repo.set_limits("user-1", [Limit.per_minute("rpm", 10_000)], resource="search")
    for _ in range(3):
        async with limiter.acquire("user-1", "search", {"rpm": 1}):
            pass

    async def acquire_some() -> None:
        for _ in range(20):
            async with limiter.acquire("user-1", "search", {"rpm": 1}):
                pass

    changes = [
        repo.set_limits("user-1", [Limit.per_minute("rpm", 10_001 + i)], resource="search")
        for i in range(96)
    ]
    results = await asyncio.gather(*changes, acquire_some(), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(e, ZAELimiterError) for e in errors), [
        repr(e) for e in errors if not isinstance(e, ZAELimiterError)
    ]
    if any(isinstance(r, FanoutIncomplete) for r in results):
        # re-running the change that is stored finishes the fan-out and writes no second event
        stored = await repo.get_limits("user-1", resource="search")
        await repo.set_limits("user-1", stored, resource="search")
    events = await repo.get_audit_events("user-1", limit=1000)
    sets = [e for e in events if e.action == "limits_set"]
    # every change was written (concurrent writes of the level take turns or are retried), each
    # with one event (each differs from the limits stored before, so none is a no-op)
    written = [
        r
        for r in results[:96]
        if not isinstance(r, BaseException) or isinstance(r, FanoutIncomplete)
    ]
    assert len(written) == 96, [type(e).__name__ for e in errors]
    assert len(sets) == 1 + 96


async def test_re_running_a_change_writes_no_second_event(repo: Repository) -> None:
    await repo.create_entity("user-1")
    for _ in range(2):
        await repo.set_limits("user-1", [Limit.per_minute("rpm", 60)], resource="search")
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 600)])
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 600)])
    assert [e.action for e in await repo.get_audit_events("user-1")] == [
        "limits_set",
        "entity_created",
    ]
    assert len(await repo.get_audit_events("$RESOURCE:search")) == 1
