"""The request hook (docs/request-hook.md), on DynamoDB Local, on both request paths."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from support.faults import ddb_error, inject
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, RateLimitExceeded, RequestEvent
from zae_limiter.dynamo import transport as transport_module


@pytest.fixture(params=["http", "botocore"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs on the lean path and through aiobotocore."""
    monkeypatch.setenv("ZAEL_TRANSPORT", request.param)
    return str(request.param)


class Bodies:
    """The raw bodies the client sends (a `before-send` handler), to see what was asked."""

    def __init__(self, client: Any) -> None:
        self.sent: list[bytes] = []
        client.meta.events.register("before-send.dynamodb", self._record)

    def _record(self, request: Any, **_: Any) -> None:
        body = request.body
        self.sent.append(body if isinstance(body, bytes) else str(body).encode())

    def asked_capacity(self) -> list[bool]:
        asked = [b"ReturnConsumedCapacity" in body for body in self.sent]
        self.sent.clear()
        return asked


async def test_every_request_is_reported_with_its_capacity(open_repo: Any, path: str) -> None:
    events: list[RequestEvent] = []
    repo = await open_repo(on_request=events.append)
    # the version record, whether the table is multi-Region (docs/multi-region.md), the namespace
    assert [e.operation for e in events] == ["GetItem", "DescribeTable", "GetItem"]
    assert all(e.outcome == "ok" for e in events)
    assert [e.read_units for e in events] == [1.0, None, 1.0]  # DescribeTable reads no item
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    events.clear()
    async with limiter.acquire("u1", "api", {"rpm": 1}):  # warm: one UpdateItem
        pass
    (event,) = events
    assert (event.operation, event.table, event.outcome, event.attempt) == (
        "UpdateItem",
        repo.table_name,
        "ok",
        1,
    )
    assert (event.read_units, event.write_units) == (None, 1.0)
    assert event.duration_ms > 0


async def test_capacity_is_asked_only_while_someone_listens(open_repo: Any, path: str) -> None:
    repo = await open_repo()
    bodies = Bodies(repo.transport.client)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    first = bodies.asked_capacity()
    assert first and not any(first)
    events: list[RequestEvent] = []
    remove = repo.add_request_listener(events.append)
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    assert bodies.asked_capacity() == [True]
    remove()
    remove()  # idempotent
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    assert bodies.asked_capacity() == [False]
    assert len(events) == 1


async def test_a_failed_condition_and_a_retry_are_reported(
    open_repo: Any, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport_module, "backoff_scale", 0.0)
    events: list[RequestEvent] = []
    repo = await open_repo(on_request=events.append, rejection_cache_ttl=0)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 2)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    events.clear()
    throttle = ddb_error("ProvisionedThroughputExceededException")
    with inject(repo.transport.client, "UpdateItem", [throttle]):
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert [(e.operation, e.outcome, e.attempt) for e in events] == [
        ("UpdateItem", "throttled", 1),
        ("UpdateItem", "ok", 2),
    ]
    events.clear()
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert [(e.operation, e.outcome) for e in events] == [("UpdateItem", "condition_failed")]


async def test_a_listener_that_raises_is_logged_and_ignored(
    open_repo: Any, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def broken(event: RequestEvent) -> None:
        raise RuntimeError("listener bug")

    repo = await open_repo(on_request=broken)
    repo.add_request_listener(lambda event: seen.append(event.operation))
    limiter = RateLimiter(repo)
    with caplog.at_level(logging.WARNING, logger="zae_limiter"):
        await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert "UpdateItem" in seen
    assert "request listener" in caplog.text and "listener bug" in caplog.text


async def test_a_listener_must_be_callable(open_repo: Any) -> None:
    from zae_limiter import ValidationError

    repo = await open_repo()
    with pytest.raises(ValidationError, match="callable"):
        repo.add_request_listener("not a function")


async def test_events_carry_the_deadline_counters(open_repo: Any, path: str) -> None:
    events: list[RequestEvent] = []
    repo = await open_repo(on_request=events.append)
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 100)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    counters = [
        (e.pending_resolutions, e.resolved_after_deadline, e.refunded_after_deadline)
        for e in events
    ]
    assert set(counters) == {(0, 0, 0)}
    with pytest.raises(RateLimiterUnavailable, match="deadline"):
        async with limiter.acquire("u1", "api", {"rpm": 1}, timeout=1e-6):
            pass  # warm: its one write cannot answer within a microsecond
    for _ in range(1000):  # the write its caller left lands off the path, then is refunded
        if not repo.get_cache_stats().pending_resolutions:
            break
        await asyncio.sleep(0.01)
    assert any(e.pending_resolutions == 1 for e in events)  # sent for the caller that left
    events.clear()
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    (event,) = events
    assert (
        event.pending_resolutions,
        event.resolved_after_deadline,
        event.refunded_after_deadline,
        event.abandoned_at_close,
    ) == (0, 1, 1, 0)
    assert repo.get_cache_stats().refunded_after_deadline == 1
