"""Concurrency limits on DynamoDB Local (docs/concurrency.md): held on admission, given back on
exit, refund and release, renewed while open, and freed by the next writer when their process
stops renewing them. Costs are counted on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from support.clock import FakeClock
from support.faultproxy import limiter_behind_proxy
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository, ValidationError
from zae_limiter.dynamo import keys

TTL_S = 3
TTL_MS = TTL_S * 1000


def parallel(n: int = 2) -> list[Limit]:
    return [Limit.concurrent("parallel", n, lease_ttl=TTL_S)]


async def stored(repo: Repository, entity: str = "u1") -> dict[str, Any]:
    """The concurrency limit's stored attributes, read from the table."""
    key = keys.bucket(repo._ns, entity, "llm", 0)
    raw = await repo.transport.client.get_item(
        TableName=repo.table_name,
        Key={"PK": {"S": key["PK"]}, "SK": {"S": key["SK"]}},
        ConsistentRead=True,
    )
    if "Item" not in raw:  # never written
        return {"v": 0, "h": {}}
    limit = raw["Item"]["L"]["M"]["parallel"]["M"]
    return {
        "v": int(limit["v"]["N"]),
        "h": {k: int(x["N"]) for k, x in limit["h"]["M"].items()},
    }


async def refused(limiter: RateLimiter) -> bool:
    """Whether one more hold of "parallel" is refused for u1 (a hold taken is given back)."""
    try:
        async with limiter.acquire("u1", "llm", {"parallel": 1}):
            return False
    except RateLimitExceeded:
        return True


async def test_holds_cap_what_runs_at_once_and_come_back_on_every_exit(
    limiter: RateLimiter, repo: Repository
) -> None:
    await limiter.set_resource_defaults("llm", parallel(2))
    a = limiter.acquire("u1", "llm", {"parallel": 1})
    b = limiter.acquire("u1", "llm", {"parallel": 1})
    await a.__aenter__()
    await b.__aenter__()
    with pytest.raises(RateLimitExceeded) as full:
        async with limiter.acquire("u1", "llm", {"parallel": 1}):
            pass
    (status,) = full.value.statuses
    assert status.exceeded and status.available == 0
    assert full.value.retry_after_seconds == TTL_S  # this process's own: at their expiry
    assert (await stored(repo))["v"] == 2000
    await a.__aexit__(None, None, None)  # normal exit
    await b.__aexit__(RuntimeError, RuntimeError("work failed"), None)  # refund
    assert (await stored(repo))["v"] == 0
    async with limiter.acquire("u1", "llm", {"parallel": 2}) as lease:
        await lease.release(parallel=1)
        assert (await stored(repo))["v"] == 2000  # release() is written on exit
    after = await stored(repo)
    assert after["v"] == 0 and sum(after["h"].values()) == 0
    assert lease.hold_lost is False


async def test_a_dead_processs_hold_is_freed_by_the_next_writer_after_its_lease_ttl(
    open_repo: Any, clock: FakeClock, wire: Any
) -> None:
    dead = RateLimiter(await open_repo(rejection_cache_ttl=0))
    alive = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await alive.set_resource_defaults("llm", parallel(1))
    async with alive.acquire("u1", "llm", {"parallel": 1}):  # warms `alive`'s images
        pass
    clock.advance(1)
    dead.repository.scope.admission.renewals.stop()
    await dead.acquire("u1", "llm", {"parallel": 1}).__aenter__()
    # ... it never exits and never renews. `alive` is refused until TTL after it last saw it.
    assert await refused(alive)
    clock.advance(TTL_MS)
    assert await refused(alive)  # first seen less than lease_ttl ago: still held
    clock.advance(TTL_MS // 3)
    with wire.block() as w:
        async with alive.acquire("u1", "llm", {"parallel": 1}) as lease:
            assert lease.hold_lost is False
    assert (w.round_trips, w.wcu) == (2, 2)  # admitted freeing the dead hold, then its exit
    assert w.rcu == 0


async def hold_two_after_five_of_100_ms(open_repo: Any, clock: FakeClock) -> RateLimiter:
    """A process whose holds on u1's llm last 100 ms, holding the whole cap (2) now."""
    busy = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await busy.set_resource_defaults("llm", parallel(2))
    for _ in range(5):
        async with busy.acquire("u1", "llm", {"parallel": 1}):
            clock.advance(100)
    for _ in range(2):
        await busy.acquire("u1", "llm", {"parallel": 1}).__aenter__()
    return busy


async def test_live_holders_are_waited_for_as_long_as_holds_last_here(
    open_repo: Any, clock: FakeClock
) -> None:
    """Issue 42 item 3 (spec §5.19): with live holders the wait is how long this process's
    recent holds on the item lasted (100 ms), not the lease_ttl (it said 3.001 s)."""
    busy = await hold_two_after_five_of_100_ms(open_repo, clock)
    with pytest.raises(RateLimitExceeded) as live:
        async with busy.acquire("u1", "llm", {"parallel": 1}):
            pass
    assert live.value.retry_after_seconds == 0.1


async def test_a_fresh_process_is_told_when_it_can_free_dead_holds(
    open_repo: Any, clock: FakeClock
) -> None:
    """Issue 42 item 3: with dead holders a fresh process is told when it can free them, a
    lease_ttl after it first saw them (the skew allowed, 2 minutes, outlasts their expiry),
    and is admitted exactly then. It used to say 0.001 s for that whole lease_ttl."""
    busy = await hold_two_after_five_of_100_ms(open_repo, clock)
    busy.repository.scope.admission.renewals.stop()  # the process dies holding both
    clock.advance(TTL_MS + 1)  # past their expiry
    fresh = RateLimiter(await open_repo(rejection_cache_ttl=0))
    with pytest.raises(RateLimitExceeded) as dead:
        async with fresh.acquire("u1", "llm", {"parallel": 1}):
            pass
    assert dead.value.retry_after_seconds == TTL_S + 0.001
    clock.advance(TTL_MS)
    assert await refused(fresh)  # 1 ms early: still held
    clock.advance(1)
    assert not await refused(fresh)


async def test_admit_and_exit_cost_one_write_each(limiter: RateLimiter, wire: Any) -> None:
    await limiter.set_resource_defaults("llm", parallel(4))
    async with limiter.acquire("u1", "llm", {"parallel": 1}):
        pass
    acquisition = limiter.acquire("u1", "llm", {"parallel": 1})
    with wire.block() as admit:
        await acquisition.__aenter__()
    with wire.block() as leave:
        await acquisition.__aexit__(None, None, None)
    assert (admit.round_trips, admit.rcu, admit.wcu) == (1, 0, 1)
    assert (leave.round_trips, leave.rcu, leave.wcu) == (1, 0, 1)


async def test_a_long_lease_keeps_its_hold_by_renewing_it(
    open_repo: Any, clock: FakeClock, wire: Any
) -> None:
    limiter = RateLimiter(await open_repo(rejection_cache_ttl=0))
    other = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await limiter.set_resource_defaults("llm", parallel(1))
    renewals = limiter.repository.scope.admission.renewals
    renewals.stop()  # renewals are driven by the test's clock below, not by the task
    async with other.acquire("u1", "llm", {"parallel": 0}):
        pass
    acquisition = limiter.acquire("u1", "llm", {"parallel": 1})
    lease = await acquisition.__aenter__()
    written = 0
    for _ in range(5 * 3):  # 5 x lease_ttl in steps of lease_ttl / 3
        clock.advance(TTL_MS // 3)
        with wire.block() as w:
            written += await renewals.renew_due()
        assert w.wcu == w.round_trips  # one write per renewal
        assert await refused(other)  # still held: the other process is refused
    assert written == 15 and lease.hold_lost is False
    await acquisition.__aexit__(None, None, None)
    async with other.acquire("u1", "llm", {"parallel": 1}):
        pass


async def test_a_lease_whose_hold_lapsed_is_told_and_gives_nothing_back_twice(
    open_repo: Any, clock: FakeClock
) -> None:
    limiter = RateLimiter(await open_repo(rejection_cache_ttl=0))
    other = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await limiter.set_resource_defaults("llm", parallel(1))
    limiter.repository.scope.admission.renewals.stop()  # its renewals fail: it loses DynamoDB
    async with other.acquire("u1", "llm", {"parallel": 0}):
        pass
    acquisition = limiter.acquire("u1", "llm", {"parallel": 1})
    lease = await acquisition.__aenter__()
    assert await refused(other)  # `other` sees the hold ...
    clock.advance(TTL_MS + TTL_MS // 3 + 1)  # ... and sees it unrenewed for over a lease_ttl
    assert lease.hold_lost is True
    async with other.acquire("u1", "llm", {"parallel": 1}):  # frees the lapsed hold
        repo = other.repository
        assert (await stored(repo))["v"] == 1000
        await acquisition.__aexit__(None, None, None)  # gives back nothing: not other's hold
        assert (await stored(repo))["v"] == 1000
    assert lease.hold_lost is True
    assert (await stored(repo))["v"] == 0
    ledger = limiter.repository.scope.admission.ledger
    assert not ledger.holding()  # nothing left to renew


async def test_sharding_stops_before_a_share_of_max_in_flight_falls_below_one(
    open_repo: Any, clock: FakeClock
) -> None:
    """Spec §5.19: a hot bucket splits until its concurrency limit's share would fall below 1
    (2 shards for max_in_flight=2), and pre-splitting further is a ValidationError naming the
    fix. The same traffic on a rate limit alone splits past 2 (the floor is what stops it)."""
    repo = await open_repo(split_writes_per_second=5)
    repo._admission.rate_span_ms = 3_000
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("llm", [Limit.per_minute("rpm", 1_000_000)])
    await limiter.set_limits("u1", [*parallel(2), Limit.per_minute("rpm", 1_000_000)], "llm")
    for entity in ("u1", "u2"):  # u2: the rate limit alone
        for _ in range(12 * 30):  # twelve seconds at 30 writes a second, one at a time
            async with limiter.acquire(entity, "llm", {"rpm": 1}):
                pass
            clock.advance(33)
            await repo._admission.settle_splits()
    assert {b.shard_count for b in await repo.get_buckets("u1", "llm")} == {2}
    assert min(b.shard_count for b in await repo.get_buckets("u2", "llm")) > 2
    assert await repo._admission.split("u1", "llm", 2) == 2  # refused at the transaction too
    with pytest.raises(ValidationError, match=r"at most 2 shards.*max_in_flight to at least 4"):
        await repo.set_shards("u1", "llm", 4)
    one, two = (limiter.acquire("u1", "llm", {"parallel": 1}) for _ in range(2))
    async with one, two:  # a shard each: 2 at once, a third refused
        assert await refused(limiter)


async def test_set_shards_past_the_floor_writes_nothing(
    limiter: RateLimiter, repo: Repository, wire: Any
) -> None:
    """Issue 42 item 4: `set_shards(..., 4)` on max_in_flight=2 is refused before any write
    (it used to split into 2 shards, then raise), on a bucket that exists and on one that
    does not (it is not created either)."""
    await limiter.set_resource_defaults("llm", parallel(2))
    async with limiter.acquire("u1", "llm", {"parallel": 1}):
        pass
    for entity in ("u1", "u2"):  # u2's bucket was never written
        async with wire.block() as w:
            with pytest.raises(ValidationError, match=r"at most 2 shards.*at least 4"):
                await repo.set_shards(entity, "llm", 4)
        assert w.wcu == 0 and "TransactWriteItems" not in w.by_operation
    assert [b.shard_count for b in await repo.get_buckets("u1", "llm")] == [1]
    assert await repo.get_buckets("u2", "llm") == []
    assert await repo.set_shards("u1", "llm", 2) == 2  # what the limit allows


async def test_an_organisation_wide_cap_holds_child_and_org_all_or_none(
    limiter: RateLimiter, repo: Repository
) -> None:
    """Cascade: each member holds against its own cap and the organisation's, in one write; a
    refusal by either debits neither, and every exit (normal or refunded) gives back both."""
    await limiter.create_entity(entity_id="org")
    for member in ("u1", "u2"):
        await limiter.create_entity(entity_id=member, parent_id="org")
        await limiter.set_limits(member, parallel(2), resource="llm")
    await limiter.set_limits("org", parallel(3), resource="llm")
    await repo.set_resource_cascade("llm", True)

    async def held() -> dict[str, int]:
        return {e: (await stored(repo, e))["v"] // 1000 for e in ("u1", "u2", "org")}

    a = limiter.acquire("u1", "llm", {"parallel": 2})
    await a.__aenter__()
    assert await refused(limiter)  # u1's own cap; the organisation has room for one more
    assert await held() == {"u1": 2, "u2": 0, "org": 2}
    b = limiter.acquire("u2", "llm", {"parallel": 1})
    await b.__aenter__()
    with pytest.raises(RateLimitExceeded) as full:  # u2 has room, the organisation does not
        async with limiter.acquire("u2", "llm", {"parallel": 1}):
            pass
    assert [s.entity_id for s in full.value.statuses if s.exceeded] == ["org"]
    assert await held() == {"u1": 2, "u2": 1, "org": 3}
    await a.__aexit__(None, None, None)
    await b.__aexit__(RuntimeError, RuntimeError("work failed"), None)
    assert await held() == {"u1": 0, "u2": 0, "org": 0}
    async with limiter.acquire("u2", "llm", {"parallel": 2}):  # the org's room is back
        assert await held() == {"u1": 0, "u2": 2, "org": 2}


async def test_a_consume_after_the_hold_lapsed_holds_anew_and_exit_gives_back_only_that(
    open_repo: Any, clock: FakeClock
) -> None:
    """A lease whose hold was freed by another writer takes more with `consume()`: that lands on
    the process's new entry (beside another lease's hold there), and the exit gives back only
    the lease's part of that entry: never what was freed already, never the other lease's part;
    nothing stays held and nothing is left for the process to renew."""
    limiter = RateLimiter(await open_repo(rejection_cache_ttl=0))
    other = RateLimiter(await open_repo(rejection_cache_ttl=0))
    await limiter.set_resource_defaults("llm", parallel(3))
    limiter.repository.scope.admission.renewals.stop()  # its renewals fail
    repo = other.repository
    acquisition = limiter.acquire("u1", "llm", {"parallel": 1})
    lease = await acquisition.__aenter__()
    async with other.acquire("u1", "llm", {"parallel": 0}):  # `other` sees the hold ...
        pass
    clock.advance(TTL_MS + TTL_MS // 3 + 1)  # ... unrenewed for over a lease_ttl
    async with other.acquire("u1", "llm", {"parallel": 1}):  # frees the lapsed hold, holds 1
        assert lease.hold_lost is True
        assert (await stored(repo))["v"] == 1000
        async with limiter.acquire("u1", "llm", {"parallel": 1}):  # the process's new entry
            await lease.consume(parallel=1)  # lands on that entry too: 3 held
            assert (await stored(repo))["v"] == 3000
            assert lease.consumed == {"parallel": 2}  # what the lease took, freed part included
            assert lease.hold_lost is True  # it was lost, whatever it holds now
            await acquisition.__aexit__(None, None, None)
            mid = await stored(repo)
            assert mid["v"] == 2000  # the lease's 1 on the new entry came back, no more
            assert sorted(v for v in mid["h"].values() if v) == [1000, 1000]
        assert (await stored(repo))["v"] == 1000  # other's hold stays
    final = await stored(repo)
    assert final["v"] == 0 and sum(final["h"].values()) == 0
    assert not limiter.repository.scope.admission.ledger.holding()


async def test_a_lease_is_told_at_once_when_its_hold_lapses(table: TableRef) -> None:
    """Issue 42 item 14: a lease whose renewals fail (DynamoDB partitioned behind a fault
    proxy, the real clock) is told as soon as its hold lapses: `wait_hold_lost()` returns True
    and an `on_hold_lost` callback runs once, while the block is still open. `hold_lost` was
    passive before: nothing told the work to stop."""
    async with limiter_behind_proxy(table, 5) as (proxy, limiter):
        await limiter.set_resource_defaults("llm", [Limit.concurrent("parallel", 2, lease_ttl=1)])
        told: list[bool] = []
        async with limiter.acquire("u1", "llm", {"parallel": 1}, timeout=None):
            pass  # warm, with no deadline: the config and the bucket are seen
        async with limiter.acquire("u1", "llm", {"parallel": 1}, timeout=1.0) as lease:
            await lease.on_hold_lost(lambda: told.append(lease.hold_lost))
            assert told == [] and not lease.hold_lost
            proxy.partition(600)  # every renewal from now on hangs and is dropped
            assert await lease.wait_hold_lost(timeout=60) is True
            for _ in range(3):
                await asyncio.sleep(0)  # the callback is scheduled on the loop
            assert told == [True]
        assert lease.hold_lost and await lease.wait_hold_lost() is True  # frozen at exit
