"""Every input rule of docs/limits-and-time.md raises before any I/O (nothing read or written)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from zae_limiter import (
    InvalidIdentifierError,
    InvalidNameError,
    Limit,
    RateLimiter,
    ScheduleEntry,
    ValidationError,
)

BAD_LIMITS = [
    (lambda: Limit.per_minute("1st", 10), InvalidNameError),
    (lambda: Limit.per_minute("wcu", 10), InvalidNameError),
    (lambda: Limit.per_minute("x" * 65, 10), InvalidNameError),
    (lambda: Limit.per_minute("rpm", 0), ValidationError),
    (lambda: Limit.per_minute("rpm", 10**15 + 1), ValidationError),
    (lambda: Limit.per_minute("rpm", 1.5), ValidationError),  # type: ignore[arg-type]
    (lambda: Limit.per_minute("rpm", True), ValidationError),
    (lambda: Limit.custom("rpm", 10, 1, 0), ValidationError),
    (lambda: Limit.custom("rpm", 10, 1, 10**9 + 1), ValidationError),
    (lambda: Limit.custom("rpm", 10, 0, 60), ValidationError),
    (lambda: Limit.quota("q", 10), ValidationError),
    (
        lambda: Limit.quota("q", 10, cron="0 0 * * 1", reset_after=timedelta(hours=1)),
        ValidationError,
    ),
    (lambda: Limit.quota("q", 10, reset_after=timedelta(seconds=1.5)), ValidationError),
    (lambda: Limit.quota("q", 10, cron="0 0 L * *"), ValidationError),
    (lambda: Limit.quota("q", 10, cron="0 0 * * 1#2"), ValidationError),
    (lambda: Limit.quota("q", 10, cron="0 0 0 * * *"), ValidationError),
    (lambda: Limit.quota("q", 10, cron="0 0 * * 1", tz="Mars/Olympus"), ValidationError),
    (lambda: ScheduleEntry("* 9-17 * * MON-FRI", scale=2.0, capacity=5), ValidationError),
    (lambda: ScheduleEntry("* * * * *", scale=0), ValidationError),
    (
        lambda: Limit.quota("q", 10, cron="0 0 * * 1").with_schedule(
            (ScheduleEntry("* * * * *", refill_amount=5),)
        ),
        ValidationError,
    ),
]


@pytest.mark.parametrize(("build", "error"), BAD_LIMITS)
def test_limit_rules(build: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()


def test_validation_errors_name_the_field_and_truncate_the_value() -> None:
    with pytest.raises(ValidationError) as info:
        Limit.per_minute("rpm", -1)
    assert info.value.field == "rate" and "between" in info.value.reason
    long = ValidationError("x", "y" * 100, "bad")
    assert str(long).count("y") == 49 and "..." in str(long)
    assert isinstance(info.value, ValueError)


BAD_ACQUIRES: list[tuple[dict[str, Any], type[Exception]]] = [
    ({"entity_id": "-starts-with-dash"}, InvalidIdentifierError),
    ({"entity_id": "a" * 257}, InvalidIdentifierError),
    ({"entity_id": "has space"}, InvalidIdentifierError),
    ({"resource": "9lives"}, InvalidNameError),
    ({"resource": "_default_"}, InvalidNameError),
    ({"consume": {"rpm": -1}}, ValidationError),
    ({"consume": {"rpm": 10**15 + 1}}, ValidationError),
    ({"consume": {"rpm": True}}, ValidationError),
    ({"consume": {"rpm": 1.0}}, ValidationError),
    ({"consume": {}}, ValidationError),
    ({"consume": {"bad name": 1}}, InvalidNameError),
    ({"limits": [Limit.per_minute("a", 1), Limit.per_minute("a", 2)]}, ValidationError),
    ({"on_unavailable": "allow"}, ValidationError),
]


@pytest.mark.parametrize(("change", "error"), BAD_ACQUIRES)
async def test_acquire_rules(
    limiter: RateLimiter, wire: Any, change: dict[str, Any], error: type[Exception]
) -> None:
    args: dict[str, Any] = {
        "entity_id": "user-1",
        "resource": "openai/gpt-4",
        "consume": {"rpm": 1},
    }
    args.update(change)
    with wire.block() as w, pytest.raises(error):
        async with limiter.acquire(**args):
            pass
    assert w.requests == []


async def test_names_the_spec_allows(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("llama3:8b", [Limit.per_minute("tok.in-1", 10)])
    async with limiter.acquire("user@example.com:key-1", "llama3:8b", {"tok.in-1": 1}) as lease:
        assert lease.consumed == {"tok.in-1": 1}


@pytest.mark.parametrize(
    "call",
    [
        lambda r: r.create_entity("ok", metadata={"k": 1}),
        lambda r: r.create_entity("ok", metadata={f"k{i}": "v" for i in range(33)}),
        lambda r: r.create_entity("bad id"),
        lambda r: r.create_entity("ok", parent_id="ok"),
        lambda r: r.set_limits("ok", [Limit.per_minute("a", 1)], resource="bad resource"),
        lambda r: r.set_limits("ok", "not a list"),
        lambda r: r.set_resource_defaults("_default_", [Limit.per_minute("a", 1)]),
        lambda r: r.check_availability("ok", "api", needed={"a": -1}),
        lambda r: r.register_namespace("_"),
        lambda r: r.set_limits("ok", [Limit.per_minute("a", 1)], disabled="maybe"),
    ],
)
async def test_admin_rules(limiter: RateLimiter, wire: Any, call: Any) -> None:
    with wire.block() as w, pytest.raises(ValidationError):
        await call(limiter.repository)
    assert w.requests == []


async def test_an_amount_above_max_in_flight_is_refused_before_any_io(
    limiter: RateLimiter, wire: Any
) -> None:
    limits = [Limit.per_minute("rpm", 100), Limit.concurrent("parallel", 2)]
    with wire.block() as w, pytest.raises(ValidationError, match="max_in_flight") as info:
        async with limiter.acquire("user-1", "llm", {"parallel": 3}, limits=limits):
            pass
    assert w.requests == [] and info.value.field == "consume['parallel']"


async def test_an_amount_above_a_stored_max_in_flight_is_refused_and_nothing_is_written(
    limiter: RateLimiter,
) -> None:
    await limiter.set_resource_defaults("llm", [Limit.concurrent("parallel", 2)])
    await limiter.create_entity("org-1")
    await limiter.create_entity("user-1", parent_id="org-1", cascade=True)
    await limiter.set_limits("org-1", [Limit.concurrent("parallel", 1)], resource="llm")
    for entity, amount, whose in (("user-2", 3, "'user-2'"), ("user-1", 2, "'org-1'")):
        with pytest.raises(ValidationError, match=f"'llm' for {whose} holds at most"):
            async with limiter.acquire(entity, "llm", {"parallel": amount}):
                pass
    assert await limiter.repository.get_buckets("user-1") == []
    assert await limiter.repository.get_buckets("user-2") == []
    assert await limiter.repository.get_buckets("org-1") == []
