"""Single-resource acquire on DynamoDB Local: admission, leases, errors
(docs/getting-started.md)."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ValidationError,
)
from zae_limiter.errors import LeaseExpiredError


async def test_admits_until_the_burst_then_rejects_with_a_wait(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 60, burst=3)])
    for _ in range(3):
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    error = info.value
    assert [s.limit_name for s in error.violations] == ["rpm"]
    assert error.retry_after_seconds == pytest.approx(1.001)
    assert error.retry_after_header == "2"
    body = error.as_dict()
    assert body["error"] == "rate_limit_exceeded"
    assert body["limits"][0]["available"] == 0


async def test_refill_admits_again_after_the_quoted_wait(limiter: RateLimiter, clock) -> None:  # type: ignore[no-untyped-def]
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 60, burst=1)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    clock.advance(round(info.value.retry_after_seconds * 1000))
    async with limiter.acquire("u1", "api", {"rpm": 1}) as lease:
        assert lease.consumed == {"rpm": 1}


async def test_exit_reconciles_adjustments_and_clamps_credits(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 1_000)])
    async with limiter.acquire("u1", "api", {"tokens": 100}) as lease:
        await lease.adjust(tokens=50)
        await lease.release(tokens=400)  # more than taken: clamped at zero
        assert lease.consumed == {"tokens": 0}
    assert (await limiter.available("u1", "api"))["tokens"] == 1_000


async def test_an_exception_in_the_block_refunds_everything(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("tokens", 1_000)])
    with pytest.raises(KeyError):
        async with limiter.acquire("u1", "api", {"tokens": 300}) as lease:
            await lease.consume(tokens=200)
            raise KeyError("boom")
    assert (await limiter.available("u1", "api"))["tokens"] == 1_000


async def test_consume_is_judged_against_the_live_balance(open_repo) -> None:  # type: ignore[no-untyped-def]
    a = RateLimiter(await open_repo())
    b = RateLimiter(await open_repo())
    await a.set_resource_defaults("api", [Limit.per_minute("tokens", 100)])
    async with a.acquire("u1", "api", {"tokens": 50}) as lease:
        async with b.acquire("u1", "api", {"tokens": 40}):
            pass
        with pytest.raises(RateLimitExceeded):
            await lease.consume(tokens=20)  # the image this lease holds says 50 are left
        await lease.consume(tokens=10)
        assert lease.consumed == {"tokens": 60}
    assert (await a.available("u1", "api"))["tokens"] == 0


async def test_changing_members_after_exit_raise(limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    async with limiter.acquire("u1", "api", {"rpm": 1}) as lease:
        pass
    with pytest.raises(LeaseExpiredError):
        await lease.adjust(rpm=1)
    assert lease.consumed == {"rpm": 1}  # read-only members keep their final values (§2.4)


async def test_unknown_limit_names_are_refused_and_nothing_is_written(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    with pytest.raises(ValidationError, match="declares"):
        async with limiter.acquire("u1", "api", {"rpmm": 1}):
            pass
    assert await repo.get_buckets("u1") == []
    async with limiter.acquire("u1", "api", {"rpm": 1}) as lease:
        with pytest.raises(ValidationError):
            await lease.adjust(typo=1)


async def test_an_unmetered_resource_admits_and_writes_nothing(
    limiter: RateLimiter, repo: Repository, wire: Any
) -> None:
    async with limiter.acquire("u1", "free", {"anything": 5}) as lease:
        await lease.adjust(anything=2)
        assert lease.consumed == {"anything": 7}
    with wire.block() as w:
        async with limiter.acquire("u1", "free", {"anything": 5}):
            pass
    assert w.requests == [] and await repo.get_buckets("u1") == []
    availability = await limiter.check_availability("u1", "free")
    assert availability.allowed and availability.statuses == []


async def test_config_hierarchy_replaces_not_merges(limiter: RateLimiter, repo: Repository) -> None:
    await limiter.set_system_defaults([Limit.per_minute("rpm", 1)])
    await limiter.set_resource_defaults(
        "search", [Limit.per_minute("requests", 60), Limit.per_minute("units", 10)]
    )
    await limiter.set_limits("u1", [Limit.per_minute("requests", 600)], resource="search")
    limits, _, source = await repo.resolve_limits("u1", "search")
    assert source == "entity" and [lim.name for lim in limits or []] == ["requests"]
    # the entity's level has no `units`, so units are not limited for u1
    with pytest.raises(ValidationError):
        async with limiter.acquire("u1", "search", {"units": 100}):
            pass
    await limiter.set_limits("u2", [Limit.per_minute("requests", 5)])  # _default_
    assert (await repo.resolve_limits("u2", "search"))[2] == "entity_default"
    assert (await repo.resolve_limits("u3", "search"))[2] == "resource"
    assert (await repo.resolve_limits("u3", "other"))[2] == "system"


async def test_entity_changes_reach_another_process_on_its_next_call(open_repo, clock) -> None:  # type: ignore[no-untyped-def]
    a = RateLimiter(await open_repo())
    b = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await a.set_resource_defaults("api", [Limit.per_minute("rpm", 2)])
    for _ in range(2):
        async with b.acquire("u1", "api", {"rpm": 1}):
            pass
    await a.set_limits("u1", [Limit.per_minute("rpm", 100)], resource="api")  # an upgrade
    clock.advance(seconds=1)  # at the new rate 1.67 tokens came back; at the old one 0.03
    async with b.acquire("u1", "api", {"rpm": 1}):  # b's cached image is stale: it must notice
        pass
    await a.delete_limits("u1", resource="api")  # downgrade: cut to the new ceiling
    with pytest.raises(RateLimitExceeded):
        async with b.acquire("u1", "api", {"rpm": 1}):
            pass


async def test_resource_defaults_reach_another_process_within_the_ttl(open_repo, clock) -> None:  # type: ignore[no-untyped-def]
    a = RateLimiter(await open_repo(config_cache_ttl=60))
    b = RateLimiter(await open_repo(config_cache_ttl=60))
    await a.set_resource_defaults("api", [Limit.per_minute("rpm", 1)])
    async with b.acquire("u1", "api", {"rpm": 1}):
        pass
    await a.set_resource_defaults("api", [Limit.per_minute("rpm", 1_000)])
    clock.advance(seconds=60)  # b's cached resource level is now older than its TTL
    async with b.acquire("u1", "api", {"rpm": 1}):  # the one token refilled at the old rate
        pass
    clock.advance(seconds=1)  # 16 tokens at the new rate (the old one would give 0.02)
    for _ in range(5):
        async with b.acquire("u1", "api", {"rpm": 1}):
            pass
    # a process with older config must never undo the newer stamp
    c = RateLimiter(await open_repo(config_cache_ttl=3_600))
    async with c.acquire("u1", "api", {"rpm": 1}):
        pass
    assert (await a.check_availability("u1", "api")).status("rpm").limit.capacity == 1_000


async def test_on_unavailable_allow_yields_a_degraded_lease(open_repo) -> None:  # type: ignore[no-untyped-def]
    repo = await open_repo()
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    await repo._store.transport.close()  # the client is gone: every call fails
    async with limiter.acquire(
        "u1", "api", {"rpm": 1}, on_unavailable=OnUnavailable.ALLOW
    ) as lease:
        assert lease.degraded and lease.resources == ()
        await lease.resource("anything").adjust(x=1)
        assert lease.consumed == {}
    with pytest.raises(RateLimiterUnavailable):
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass


async def test_stored_on_unavailable_is_used_when_the_call_gives_none(open_repo) -> None:  # type: ignore[no-untyped-def]
    repo = await open_repo()
    limiter = RateLimiter(repo)
    await limiter.set_system_defaults([], on_unavailable=OnUnavailable.ALLOW)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    async with limiter.acquire("u1", "api", {"rpm": 1}):
        pass
    await repo._store.transport.close()
    async with limiter.acquire("u1", "api", {"rpm": 1}) as lease:
        assert lease.degraded


async def test_a_refusal_names_its_limit_even_if_the_balance_refills_just_after(
    open_repo: Any, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 1: the lane refused the write at one instant and the caller built its
    rejection later (other tasks ran in between); the balance had refilled past the request by
    then, and the 429 said `contended` with no violation and a 0.1 s wait. Here 1 ms passes
    right after the planner refuses: the rejection is still judged where it was refused."""
    from zae_limiter.acquire import planning

    admit = planning.admit_planner

    def admit_then_time_passes(admissions: int, ledger: Any = None) -> Any:
        plan = admit(admissions, ledger)

        def planned(target: Any, now: int) -> Any:
            result = plan(target, now)
            if result is None:
                clock.advance(1)  # the event loop was busy before the caller resumed
            return result

        return planned

    repo = await open_repo(rejection_cache_ttl=0.0)  # decided on the lane, not from the cache
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 60)])
    async with limiter.acquire("u1", "api", {"rpm": 60}):
        pass
    clock.advance(999)  # 0.999 rpm dripped back: one more is refused, for 1 ms
    monkeypatch.setattr(planning, "admit_planner", admit_then_time_passes)
    with pytest.raises(RateLimitExceeded) as info:
        async with limiter.acquire("u1", "api", {"rpm": 1}):
            pass
    assert not info.value.contended
    assert [(s.limit_name, s.available) for s in info.value.violations] == [("rpm", 0)]
    assert info.value.retry_after_seconds == 0.002 and info.value.retry_after_header == "1"
