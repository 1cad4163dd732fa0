"""`top_up()` and `reset_bucket()` on DynamoDB Local (docs/reset-and-top-up.md, docs/performance.md,
docs/versions.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import botocore.exceptions
import pytest

from support.clock import FakeClock
from support.faults import ddb_error, inject
from zae_limiter import (
    AuditAction,
    BucketOperationResult,
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
    ValidationError,
    VersionMismatchError,
)
from zae_limiter.core import bucket
from zae_limiter.core.bucket import MILLI, Slot, State
from zae_limiter.dynamo import bucket_items as items
from zae_limiter.dynamo import keys, transport

HOUR_MS = 3_600_000
WEEK_MS = 7 * 24 * HOUR_MS
WEEKLY = Limit.quota("weekly", 1_000, cron="0 0 * * 1")
SESSION = Limit.quota("session", 100, reset_after=timedelta(hours=5))


@pytest.fixture(autouse=True)
async def known_entities(repo: Repository) -> None:
    """Balance operations refuse an entity that has neither a record nor a bucket (§5.9)."""
    for entity in ("u1", "u2"):
        await repo.create_entity(entity)


async def spend(limiter: RateLimiter, entity: str, resource: str, **amounts: int) -> None:
    async with limiter.acquire(entity, resource, amounts):
        pass


async def available(limiter: RateLimiter, entity: str, resource: str) -> dict[str, int]:
    return await limiter.available(entity, resource)


async def events(repo: Repository, entity: str) -> list[Any]:
    """The entity's audit events after its creation."""
    found = await repo.get_audit_events(entity)
    return [e for e in found if e.action != AuditAction.ENTITY_CREATED]


# --- calendar quotas -----------------------------------------------------------------------------


async def test_a_calendar_top_up_adds_exactly_n_until_the_next_edge(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await spend(limiter, "u1", "budget", weekly=900)
    result = await repo.top_up("u1", "budget", {"weekly": 500})
    assert (result.shards, result.amounts, result.replayed) == (1, {"weekly": 500}, False)
    assert await available(limiter, "u1", "budget") == {"weekly": 600}
    await spend(limiter, "u1", "budget", weekly=600)  # above the plan's 1,000 in one week
    with pytest.raises(RateLimitExceeded):
        await spend(limiter, "u1", "budget", weekly=1)
    clock.advance(WEEK_MS)  # the next Monday: the purchase is gone with the period
    assert await available(limiter, "u1", "budget") == {"weekly": 1_000}


async def test_a_top_up_in_a_period_not_yet_opened_starts_it_full_plus_the_top_up(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await spend(limiter, "u1", "budget", weekly=1_000)
    clock.advance(WEEK_MS + 1)  # last week's balance is stale; this period has no write yet
    await repo.top_up("u1", "budget", {"weekly": 250})
    assert await available(limiter, "u1", "budget") == {"weekly": 1_250}


async def test_reset_restores_the_allowance_plus_this_periods_top_ups(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await repo.top_up("u1", "budget", {"weekly": 300})
    await spend(limiter, "u1", "budget", weekly=1_200)
    clock.advance(HOUR_MS)
    result = await repo.reset_bucket("u1", "budget")
    assert (result.shards, result.amounts) == (1, {"weekly": 1_200})
    assert await available(limiter, "u1", "budget") == {"weekly": 1_300}
    status = (await limiter.check_availability("u1", "budget")).status("weekly")
    assert status.resets_at_ms == clock.now_ms - HOUR_MS + WEEK_MS  # next edge unchanged


# --- session quotas ------------------------------------------------------------------------------


async def test_a_session_top_up_lasts_for_the_live_session_only(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [SESSION])
    await spend(limiter, "u1", "budget", session=100)
    opened = clock.now_ms
    clock.advance(HOUR_MS)
    await repo.top_up("u1", "budget", {"session": 40})
    assert await available(limiter, "u1", "budget") == {"session": 40}
    clock.set(opened + 5 * HOUR_MS)  # the session ends, and its top-up with it
    assert await available(limiter, "u1", "budget") == {"session": 100}


async def test_a_session_top_up_opens_a_session_when_none_is_live(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [SESSION])
    await repo.top_up("u1", "budget", {"session": 40})
    opened = clock.now_ms
    status = (await limiter.check_availability("u1", "budget")).status("session")
    assert (status.available, status.resets_at_ms) == (140, opened + 5 * HOUR_MS)
    clock.advance(5 * HOUR_MS)
    assert await available(limiter, "u1", "budget") == {"session": 100}


async def test_a_session_reset_ends_the_session_and_the_next_call_opens_a_fresh_one(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY, SESSION])
    await spend(limiter, "u1", "budget", weekly=80, session=80)
    await repo.top_up("u1", "budget", {"session": 10})
    clock.advance(HOUR_MS)
    result = await repo.reset_bucket("u1", "budget", limits=["session"])
    assert result.amounts == {"session": 70}  # back to 100 from 30; the top-up ends too
    assert await available(limiter, "u1", "budget") == {"weekly": 920, "session": 100}
    await spend(limiter, "u1", "budget", weekly=1, session=1)
    status = (await limiter.check_availability("u1", "budget")).status("session")
    assert status.resets_at_ms == clock.now_ms + 5 * HOUR_MS  # a fresh session, opened now


# --- dripping limits -----------------------------------------------------------------------------


async def test_a_dripping_top_up_gains_at_most_the_room_below_the_ceiling(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_hour("rph", 100)])
    await spend(limiter, "u1", "api", rph=30)
    assert (await repo.top_up("u1", "api", {"rph": 10})).amounts == {"rph": 10}
    assert await available(limiter, "u1", "api") == {"rph": 80}
    assert (await repo.top_up("u1", "api", {"rph": 500})).amounts == {"rph": 20}
    assert await available(limiter, "u1", "api") == {"rph": 100}
    assert (await repo.top_up("u1", "api", {"rph": 5})).amounts == {"rph": 0}


async def test_a_dripping_top_up_fills_a_fractional_deficit_exactly(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("api", [Limit.custom("rps", 10, 3, 7)])
    await spend(limiter, "u1", "api", rps=10)
    clock.advance(1_000)  # 3/7 of a token back: a balance between whole milli-units
    result = await repo.top_up("u1", "api", {"rps": 10})
    assert result.amounts == {"rps": 9}  # 9.571... whole tokens granted, reported floored
    assert await available(limiter, "u1", "api") == {"rps": 10}
    [state] = await repo.get_buckets("u1", "api")
    assert state.tokens == 10


async def test_reset_fills_a_dripping_limit_and_forgives_debt(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_day("units", 100, soft=True)])
    await spend(limiter, "u1", "api", units=160)  # soft: into debt
    assert await available(limiter, "u1", "api") == {"units": -60}
    assert (await repo.reset_bucket("u1", "api")).amounts == {"units": 160}
    assert await available(limiter, "u1", "api") == {"units": 100}


async def test_reset_touches_only_the_named_limits(repo: Repository, limiter: RateLimiter) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_day("a", 10), Limit.per_day("b", 10)])
    await spend(limiter, "u1", "api", a=4, b=4)
    result = await repo.reset_bucket("u1", "api", limits=["b"])
    assert result.amounts == {"b": 4}
    assert await available(limiter, "u1", "api") == {"a": 6, "b": 10}


# --- missing buckets, names, validation, gates ---------------------------------------------------


async def test_a_missing_bucket_reset_is_a_no_op_and_a_top_up_creates_it(
    repo: Repository, limiter: RateLimiter, wire: Any
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY, SESSION])
    result = await repo.reset_bucket("u1", "budget")
    assert (result.shards, result.amounts) == (0, {"weekly": 0, "session": 0})
    assert await repo.get_buckets("u1", "budget") == []
    result = await repo.top_up("u1", "budget", {"weekly": 5})
    assert (result.shards, result.amounts) == (1, {"weekly": 5})
    assert await available(limiter, "u1", "budget") == {"weekly": 1_005, "session": 100}
    with wire.block() as w:  # the item is exactly what acquire would make: no restamp
        await spend(limiter, "u1", "budget", weekly=5, session=1)
    assert w.by_operation["UpdateItem"] == 1
    assert await available(limiter, "u1", "budget") == {"weekly": 1_000, "session": 99}


async def test_a_top_up_of_a_disabled_pair_that_has_no_bucket_is_refused(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await repo.disable_entity("u1", resource="budget")
    with pytest.raises(ResourceDisabled) as info:
        await repo.top_up("u1", "budget", {"weekly": 5})
    assert info.value.level == "entity"
    assert await repo.get_buckets("u1", "budget") == []


async def test_names_the_resource_does_not_declare_are_refused(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    with pytest.raises(ValidationError):
        await repo.top_up("u1", "budget", {"monthly": 5})
    with pytest.raises(ValidationError):
        await repo.reset_bucket("u1", "budget", limits=["weekly", "monthly"])
    with pytest.raises(ValidationError):  # unmetered: nothing is declared
        await repo.top_up("u1", "search", {"rpm": 5})
    assert (await repo.reset_bucket("u1", "search")).shards == 0
    assert await repo.get_buckets("u1") == []


@pytest.mark.parametrize(
    "amounts",
    [
        {},
        {"weekly": 0},
        {"weekly": -1},
        {"weekly": True},
        {"weekly": 1.5},
        {"weekly": 10**15 + 1},
        {"bad name": 1},
        ["weekly"],
    ],
)
async def test_top_up_amounts_are_checked_before_any_io(
    repo: Repository, wire: Any, amounts: Any
) -> None:
    with wire.block() as w, pytest.raises(ValidationError):
        await repo.top_up("u1", "budget", amounts)
    assert w.requests == []


@pytest.mark.parametrize(
    ("limits", "key"),
    [
        ("weekly", None),
        ([], None),
        (["bad name"], None),
        (None, ""),
        (None, "a" * 65),
        (None, "order#1"),
        (None, 17),
    ],
)
async def test_reset_arguments_are_checked_before_any_io(
    repo: Repository, wire: Any, limits: Any, key: Any
) -> None:
    with wire.block() as w, pytest.raises(ValidationError):
        await repo.reset_bucket("u1", "budget", limits=limits, idempotency_key=key)
    assert w.requests == []


async def test_both_operations_are_gated_on_the_aggregator_version(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await repo.set_version_record(aggregator_version="0.16.3")
    for call in (
        repo.top_up("u1", "budget", {"weekly": 1}),
        repo.reset_bucket("u1", "budget"),
    ):
        with pytest.raises(VersionMismatchError) as info:
            await call
        # no aggregator function recorded: `upgrade` cannot replace its code (cdk deploy can)
        assert (info.value.required_version, info.value.can_auto_update) == ("0.17.0", False)
        assert "cdk deploy" in str(info.value)
    await repo.set_version_record(aggregator_version="0.17.0")
    await repo.top_up("u1", "budget", {"weekly": 1})
    assert (await repo.get_version_record() or {})["client_min_version"] == "0.17.0"


# --- idempotency ---------------------------------------------------------------------------------


async def test_a_retry_with_the_same_key_grants_once(
    repo: Repository, limiter: RateLimiter, clock: FakeClock, wire: Any
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    first = await repo.top_up("u1", "budget", {"weekly": 20}, idempotency_key="order-1001")
    clock.advance(60_000)
    with wire.block() as w:
        again = await repo.top_up("u1", "budget", {"weekly": 20}, idempotency_key="order-1001")
    assert again == BucketOperationResult("u1", "budget", 1, {"weekly": 20}, replayed=True)
    assert not first.replayed
    assert "TransactWriteItems" not in w.by_operation  # a replay writes nothing
    assert await available(limiter, "u1", "budget") == {"weekly": 1_020}
    assert len(await events(repo, "u1")) == 1


async def test_the_same_key_with_other_arguments_is_refused(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await repo.top_up("u1", "budget", {"weekly": 20}, idempotency_key="order-1")
    for call in (
        repo.top_up("u1", "budget", {"weekly": 21}, idempotency_key="order-1"),
        repo.top_up("u2", "budget", {"weekly": 20}, idempotency_key="order-1"),
        repo.reset_bucket("u1", "budget", idempotency_key="order-1"),
    ):
        with pytest.raises(ValidationError) as info:
            await call
        assert info.value.field == "idempotency_key"
    assert await available(limiter, "u1", "budget") == {"weekly": 1_020}


async def test_a_key_expires_after_three_days(
    repo: Repository, limiter: RateLimiter, clock: FakeClock
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_day("units", 100)])
    await spend(limiter, "u1", "api", units=100)
    await repo.reset_bucket("u1", "api", idempotency_key="support-7")
    await spend(limiter, "u1", "api", units=100)
    assert (await repo.reset_bucket("u1", "api", idempotency_key="support-7")).replayed
    clock.advance(3 * 86_400_000 + 1_000)
    await spend(limiter, "u1", "api", units=100)
    result = await repo.reset_bucket("u1", "api", idempotency_key="support-7")
    assert (result.replayed, result.amounts) == (False, {"units": 100})


class LoseResponses:
    """Let TransactWriteItems land, then lose its response (a read timeout after the write)."""

    def __init__(self, repo: Repository, times: int) -> None:
        self.events = repo.transport.client.meta.events
        self.left = times
        self.landed = 0

    def _after_call(self, http_response: Any, **_: Any) -> None:
        if http_response.status_code == 200:
            self.landed += 1
        if self.left > 0:
            self.left -= 1
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://lost.invalid")

    def __enter__(self) -> LoseResponses:
        self.events.register(
            "after-call.dynamodb.TransactWriteItems", self._after_call, unique_id="lose"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.unregister("after-call.dynamodb.TransactWriteItems", unique_id="lose")


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


@pytest.mark.usefixtures("fast_retries")
async def test_a_lost_response_is_resent_with_its_token_and_applied_once(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    with LoseResponses(repo, times=1) as lost:
        result = await repo.top_up("u1", "budget", {"weekly": 20})
    assert lost.landed == 2  # the write landed, then its re-send was answered idempotently
    assert (result.amounts, result.replayed) == ({"weekly": 20}, False)
    assert await available(limiter, "u1", "budget") == {"weekly": 1_020}
    assert len(await events(repo, "u1")) == 1


@pytest.mark.usefixtures("fast_retries")
async def test_an_unconfirmed_top_up_is_retried_safely_with_its_key(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    lost = LoseResponses(repo, times=transport.MAX_ATTEMPTS)
    with lost, pytest.raises(RateLimiterUnavailable) as info:
        await repo.top_up("u1", "budget", {"weekly": 20}, idempotency_key="order-9")
    assert lost.landed == transport.MAX_ATTEMPTS
    assert "same idempotency_key" in str(info.value)
    again = await repo.top_up("u1", "budget", {"weekly": 20}, idempotency_key="order-9")
    assert (again.replayed, again.amounts) == (True, {"weekly": 20})
    assert await available(limiter, "u1", "budget") == {"weekly": 1_020}
    [event] = await events(repo, "u1")
    assert event.details["idempotency_key"] == "order-9"


@pytest.mark.usefixtures("fast_retries")
async def test_without_a_key_an_unconfirmed_outcome_raises(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    with (
        LoseResponses(repo, times=transport.MAX_ATTEMPTS),
        pytest.raises(RateLimiterUnavailable, match="may or may not have been applied"),
    ):
        await repo.reset_bucket("u1", "budget")


# --- concurrency ---------------------------------------------------------------------------------


class BeforeTransaction:
    """Run a coroutine (another process's write) just before each TransactWriteItems is sent."""

    def __init__(self, repo: Repository, action: Callable[[], Any], times: int = 1) -> None:
        self.events = repo.transport.client.meta.events
        self.action = action
        self.left = times
        self.sent = 0

    async def _before_send(self, **_: Any) -> None:
        self.sent += 1
        if self.left > 0:
            self.left -= 1
            await self.action()

    def __enter__(self) -> BeforeTransaction:
        self.events.register(
            "before-send.dynamodb.TransactWriteItems", self._before_send, unique_id="race"
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.unregister("before-send.dynamodb.TransactWriteItems", unique_id="race")


async def test_a_quota_top_up_commutes_with_a_concurrent_debit(
    repo: Repository, open_repo: Any
) -> None:
    other = RateLimiter(await open_repo())
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await spend(limiter, "u1", "budget", weekly=100)
    with BeforeTransaction(repo, lambda: spend(other, "u1", "budget", weekly=300)) as race:
        result = await repo.top_up("u1", "budget", {"weekly": 50})
    assert race.sent == 1  # the debit landed between the read and the write: no retry needed
    assert result.amounts == {"weekly": 50}
    assert await available(limiter, "u1", "budget") == {"weekly": 650}


async def test_a_dripping_top_up_under_a_concurrent_debit_grants_what_it_reports(
    repo: Repository, open_repo: Any
) -> None:
    other = RateLimiter(await open_repo())
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_day("units", 100)])
    await spend(limiter, "u1", "api", units=30)
    with BeforeTransaction(repo, lambda: spend(other, "u1", "api", units=50)):
        result = await repo.top_up("u1", "api", {"units": 100})
    assert result.amounts == {"units": 30}  # the room it saw; the debit counts after it
    assert await available(limiter, "u1", "api") == {"units": 50}


async def test_a_restamp_between_read_and_write_makes_the_operation_plan_again(
    repo: Repository, open_repo: Any
) -> None:
    other = await open_repo()
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await spend(limiter, "u1", "budget", weekly=100)
    bigger = Limit.quota("weekly", 2_000, cron="0 0 * * 1")
    with BeforeTransaction(repo, lambda: other.set_limits("u1", [bigger], resource="budget")) as r:
        result = await repo.top_up("u1", "budget", {"weekly": 50})
    assert r.sent == 2  # cancelled by the new stamp, read again, written under it
    assert result.amounts == {"weekly": 50}
    assert await available(limiter, "u1", "budget") == {"weekly": 950}  # kept balance + 50
    assert sorted(e.action for e in await events(repo, "u1")) == [
        AuditAction.BUCKET_TOPPED_UP,
        AuditAction.LIMITS_SET,
    ]


# --- shards --------------------------------------------------------------------------------------


async def split_into_shards(repo: Repository, entity: str, resource: str, count: int) -> None:
    """Rewrite a live bucket as `count` shards with equal shares (what a split leaves behind)."""
    found = await repo._store.get(keys.bucket(repo.namespace_id, entity, resource, 0))
    assert found is not None
    image = items.parse(found)
    stamp = replace(image.stamp, shards=count)
    states = {  # a quota keeps its remaining balance, shared; a dripping limit starts full
        name: State(v=state.v // count, w=state.w) if state.w is not None else State()
        for name, state in image.states.items()
    }
    for shard in range(count):
        item = items.full_item(
            repo.namespace_id,
            entity,
            resource,
            shard,
            stamp,
            image.stamp_seq + 1,
            states,
            admissions=0,
            generation="split",
            now=repo._clock(),
            ttl=None,
        )
        await repo._store.put(item)
    repo._forget(entity)


async def totals(repo: Repository, entity: str, resource: str) -> dict[str, int]:
    """Balances summed over every shard in milli-units, then shown in whole units."""
    shard_zero = await repo._store.get(keys.bucket(repo.namespace_id, entity, resource, 0))
    assert shard_zero is not None
    count = items.parse(shard_zero).stamp.shards
    out: dict[str, int] = {}
    now = repo._clock()
    for shard in range(count):
        found = await repo._store.get(keys.bucket(repo.namespace_id, entity, resource, shard))
        assert found is not None
        image = items.parse(found)
        for params in image.stamp.limits:
            slot = Slot(shard, count)
            balance = bucket.view(params, image.states[params.name], now, slot).balance
            out[params.name] = out.get(params.name, 0) + balance
    return {name: total // MILLI for name, total in out.items()}


async def test_top_up_and_reset_cover_every_shard_in_one_transaction(
    repo: Repository, limiter: RateLimiter, wire: Any
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY, Limit.per_day("units", 300)])
    await spend(limiter, "u1", "budget", weekly=400, units=1)
    await split_into_shards(repo, "u1", "budget", 4)
    assert await totals(repo, "u1", "budget") == {"weekly": 600, "units": 300}
    await spend(limiter, "u1", "budget", units=60)
    await repo.top_up("u2", "budget", {"weekly": 1})  # the gate's version read is now cached
    with wire.block() as w:
        result = await repo.top_up("u1", "budget", {"weekly": 1_001})
    assert (result.shards, result.amounts) == (4, {"weekly": 1_001})
    assert w.by_operation["TransactWriteItems"] == 1
    assert w.round_trips == 3  # config and shard 0; shards 1-3; the transaction
    assert w.wcu - w.index_wcu == 2 * (4 + 1)  # every shard and the audit event, 2 WCU each
    states = [s for s in await repo.get_buckets("u1", "budget") if s.limit_name == "weekly"]
    assert [s.topped_up for s in states] == [251, 250, 250, 250]  # whole units, exactly 1,001
    assert await totals(repo, "u1", "budget") == {"weekly": 1_601, "units": 240}
    result = await repo.reset_bucket("u1", "budget", idempotency_key="r-1")
    assert (result.shards, result.amounts) == (4, {"weekly": 400, "units": 60})
    assert await totals(repo, "u1", "budget") == {"weekly": 2_001, "units": 300}


async def test_a_dripping_top_up_fills_shards_with_room_first(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("api", [Limit.per_day("units", 400)])
    await spend(limiter, "u1", "api", units=1)
    await split_into_shards(repo, "u1", "api", 2)
    await spend(limiter, "u1", "api", units=150)  # one shard (200) is down to 50
    result = await repo.top_up("u1", "api", {"units": 120})
    assert result.amounts == {"units": 120}  # all of it on the shard with room
    assert await totals(repo, "u1", "api") == {"units": 370}


# --- costs ---------------------------------------------------------------------------------------


async def test_a_top_up_costs_one_read_wave_and_one_transaction(
    repo: Repository, limiter: RateLimiter, wire: Any
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    await spend(limiter, "u1", "budget", weekly=1)
    await repo.top_up("u1", "budget", {"weekly": 1})  # the gate's version read is now cached

    async def answer_late(**_: Any) -> None:
        await asyncio.sleep(0.3)

    # Round trips are read off the calls' times: every call answered 300 ms late, so that a read
    # sent with the others always overlaps them, however loaded the machine (on a busy one the
    # fifth read, started in the same wave, once began after the first had been answered).
    events = repo.transport.client.meta.events
    events.register("before-send.dynamodb", answer_late, unique_id="answer-late")
    try:
        with wire.block() as w:
            await repo.top_up("u1", "budget", {"weekly": 1}, idempotency_key="k-1")
    finally:
        events.unregister("before-send.dynamodb", unique_id="answer-late")
    assert all(r.end is not None and r.end - r.start >= 0.3 for r in w.requests)
    assert w.round_trips == 2  # config, shard 0 and the key's record; then the transaction
    assert w.wcu - w.index_wcu == 2 * (1 + 1 + 1)  # shard, audit event, operation record
    transaction = w.operations("TransactWriteItems")[0]
    assert transaction.items == 3


async def test_a_cancelled_transaction_is_read_and_planned_again(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    cancelled = ddb_error(
        "TransactionCanceledException",
        CancellationReasons=[{"Code": "ConditionalCheckFailed"}, {"Code": "None"}],
    )
    with inject(repo.transport.client, "TransactWriteItems", [cancelled]) as plan:
        result = await repo.top_up("u1", "budget", {"weekly": 7})
    assert plan.sent == 2
    assert result.amounts == {"weekly": 7}
    assert await available(limiter, "u1", "budget") == {"weekly": 1_007}


async def test_a_transaction_refused_for_another_reason_is_not_retried(
    repo: Repository, limiter: RateLimiter
) -> None:
    await limiter.set_resource_defaults("budget", [WEEKLY])
    refused = ddb_error(
        "TransactionCanceledException",
        CancellationReasons=[{"Code": "ValidationError"}, {"Code": "None"}],
    )
    with (
        inject(repo.transport.client, "TransactWriteItems", [refused]) as plan,
        pytest.raises(RateLimiterUnavailable, match="nothing was changed"),
    ):
        await repo.top_up("u1", "budget", {"weekly": 7})
    assert plan.sent == 1
    assert await repo.get_buckets("u1", "budget") == []
