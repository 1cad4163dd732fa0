"""Write sharding never admits more than the limits allow (docs/sharding.md), on DynamoDB Local.

Small limits sharing a bucket with a hot one, shard 0 going idle while the others are live,
quota fractions left by splits and top-ups, and availability agreeing with acquire.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.dynamo import keys


async def admit(limiter: RateLimiter, entity: str, resource: str, amounts: dict[str, int]) -> bool:
    try:
        async with limiter.acquire(entity, resource, amounts):
            return True
    except RateLimitExceeded:
        return False


async def test_small_limits_on_a_32_shard_bucket_never_exceed_their_allowance(
    repo: Repository, limiter: RateLimiter, clock: Any
) -> None:
    await limiter.set_resource_defaults(
        "api",
        [
            Limit.per_second("rps", 1_000_000),
            Limit.per_second("small", 10),
            Limit.quota("jobs", 10, cron="0 0 * * *"),
        ],
    )
    assert await repo.set_shards("org", "api", 32) == 32
    availability = await limiter.check_availability("org", "api")
    assert availability.available == {"rps": 1_000_000, "small": 10, "jobs": 10}
    small, start = 0, clock()
    for step in range(50):  # 4.9 s: at most the capacity plus what 10 a second refills
        if step:
            clock.advance(100)
        for _ in range(4):
            small += await admit(limiter, "org", "api", {"rps": 1, "small": 1})
    allowed = 10 + 10 * (clock() - start) // 1000  # 59 (before: 160 admitted)
    assert 50 <= small <= allowed
    jobs = sum([await admit(limiter, "org", "api", {"jobs": 1}) for _ in range(14)])
    assert jobs == 10
    assert (await limiter.check_availability("org", "api")).available["small"] <= 10


async def test_shard_0_past_its_ttl_while_the_others_are_live_keeps_the_layout(
    open_repo: Any, clock: Any
) -> None:
    first = await open_repo(bucket_ttl_multiplier=1)
    a = RateLimiter(first)
    await a.set_resource_defaults("api", [Limit.per_second("rps", 1_000, burst=4_000)])
    await first.set_shards("org", "api", 16)
    stored = [
        await first._store.get(keys.bucket(first.namespace_id, "org", "api", s)) for s in range(16)
    ]
    assert all(item is not None and "ttl" not in item for item in stored)  # they never expire
    # A bucket split before items of split buckets stopped expiring: shard 0 is past its TTL
    # (it takes 1/16 of the writes, so it is the first to go idle) while the others are live.
    await first._store.update(
        keys.bucket(first.namespace_id, "org", "api", 0),
        "SET #ttl = :past",
        names={"#ttl": "ttl"},
        values={":past": clock() // 1000 - 60},
    )
    admitted = 0
    for _ in range(20):  # the burst, at one instant
        admitted += 200 * await admit(a, "org", "api", {"rps": 200})
    b = RateLimiter(await open_repo(bucket_ttl_multiplier=1))  # a fresh process
    for _ in range(20):
        admitted += 200 * await admit(b, "org", "api", {"rps": 200})
        admitted += 200 * await admit(a, "org", "api", {"rps": 200})
    assert admitted <= 4_000
    counts = {s.shard_count for s in await first.get_buckets("org", "api")}
    assert counts == {16}


async def test_after_splits_and_top_ups_every_unit_of_a_quota_is_admittable_and_reported(
    repo: Repository, limiter: RateLimiter, open_repo: Any
) -> None:
    await limiter.set_resource_defaults("budget", [Limit.quota("units", 320, cron="0 0 * * *")])
    assert await admit(limiter, "org", "budget", {"units": 1})
    await repo.top_up("org", "budget", {"units": 10})
    assert await repo.set_shards("org", "budget", 32) == 32
    assert (await limiter.check_availability("org", "budget")).available == {"units": 329}
    admitted = 0
    while admitted < 320:
        assert await admit(limiter, "org", "budget", {"units": 1})
        admitted += 1
    availability = await limiter.check_availability("org", "budget", needed={"units": 1})
    assert availability.available == {"units": 9} and availability.allowed
    fresh = RateLimiter(await open_repo())
    for _ in range(9):  # a process that knows nothing of the shards takes every last unit
        assert await admit(fresh, "org", "budget", {"units": 1})
    assert not await admit(limiter, "org", "budget", {"units": 1})
    availability = await limiter.check_availability("org", "budget", needed={"units": 1})
    assert availability.available == {"units": 0} and not availability.allowed


async def test_availability_says_allowed_exactly_when_a_fresh_process_is_admitted(
    open_repo: Any, clock: Any
) -> None:
    repo = await open_repo()
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("units", 3_200)])
    await repo.set_shards("org", "api", 32)  # 100 a shard, 100 a minute
    for _ in range(32):
        assert await admit(limiter, "org", "api", {"units": 100})
    clock.advance(seconds=36)  # every shard is back to 60
    for _ in range(31):
        assert await admit(limiter, "org", "api", {"units": 60})
    assert not await admit(limiter, "org", "api", {"units": 61})
    fresh = RateLimiter(await open_repo())
    availability = await fresh.check_availability("org", "api", needed={"units": 60})
    assert availability.allowed and availability.available == {"units": 60}
    assert await admit(fresh, "org", "api", {"units": 60})  # the first call, on the one shard
    availability = await fresh.check_availability("org", "api", needed={"units": 1})
    assert not availability.allowed and availability.retry_after_seconds == 0.601  # one shard
    # above one shard's share: never fits, whatever the wait
    over = await fresh.check_availability("org", "api", needed={"units": 101})
    assert not over.allowed and over.status("units").max_request == 100
    assert over.retry_after_seconds == math.inf
    with pytest.raises(RateLimitExceeded) as info:
        async with fresh.acquire("org", "api", {"units": 101}):
            pass
    assert info.value.statuses[0].max_request == 100


DAILY = Limit.quota("rps", 4, cron="0 0 * * *")


@pytest.mark.parametrize(
    ("limit", "spent_before", "then_ms", "wait_ms", "allowed"),
    [
        (Limit.per_second("rps", 4), 1, 0, 0, 4),  # the clock stands still: no refill
        (DAILY, 1, 0, 0, 4),
        # the next day: the split reads yesterday's period (over), the debits open today's
        (DAILY, 1, 86_400_000, 0, 1 + 4),
        # Drained: the sibling gets nothing, but the debits are dated 1 s after the split's
        # time: they spend the old shard's refill of that second, which the sibling also earns.
        (Limit.per_second("rps", 4), 4, 0, 1_000, 8),
    ],
    ids=["dripping", "quota", "quota-at-its-edge", "dripping-dated-after-the-split"],
)
async def test_debits_landing_between_a_splits_read_and_its_write_are_not_admitted_twice(
    open_repo: Any,
    clock: Any,
    limit: Limit,
    spent_before: int,
    then_ms: int,
    wait_ms: int,
    allowed: int,
) -> None:
    """A split divides the balance it read (at its time) between the old shard and the new
    sibling. Debits of another process that land on the old shard after that read and before
    the split's transaction must spend only what the old shard keeps: neither the part handed
    to the sibling (spent again there), nor refill earned after the split's time (which the
    sibling earns too), nor a new quota period opened at the old, whole share."""
    first = await open_repo()
    a = RateLimiter(first)
    await a.set_resource_defaults("api", [limit])
    admitted = 0
    for _ in range(spent_before):
        admitted += await admit(a, "org", "api", {"rps": 1})
    clock.advance(then_ms)
    b = RateLimiter(await open_repo())  # another process, on the one-shard layout
    bucket_io = first._admission.waves.bucket_io
    real_split = bucket_io.split
    raced = False

    async def split_after_b_spent_it(*args: Any, **kwargs: Any) -> None:
        nonlocal admitted, raced
        if not raced:  # once, between the split's read and its transaction
            raced = True
            clock.advance(wait_ms)
            for _ in range(4):
                admitted += await admit(b, "org", "api", {"rps": 1})
        await real_split(*args, **kwargs)

    bucket_io.split = split_after_b_spent_it
    assert await first.set_shards("org", "api", 2) == 2
    fresh = RateLimiter(await open_repo())  # knows nothing: it surveys every shard
    for limiter in (fresh, a, b):
        for _ in range(4):
            admitted += await admit(limiter, "org", "api", {"rps": 1})
    # before: 5 (the old shard left at -1, the sibling at 1), 5, 7 and 10 (old shard at -2)
    assert admitted == allowed
    availability = await fresh.check_availability("org", "api")
    assert availability.available == {"rps": 0}


async def test_two_processes_of_24_tasks_across_forced_splits_stay_within_every_interval(
    open_repo: Any, clock: Any, wire: Any
) -> None:
    repos = [await open_repo(split_writes_per_second=5) for _ in range(2)]
    limiters = [RateLimiter(r) for r in repos]
    await limiters[0].set_resource_defaults(
        "api",
        [
            Limit.per_second("rps", 20),
            Limit.per_second("small", 2),
            Limit.quota("jobs", 60, cron="0 0 * * *"),
        ],
    )
    spans: list[tuple[int, int]] = []  # (clock before, clock after) of every admitted call
    small_spans: list[tuple[int, int]] = []
    ledger = {"rps": 0, "small": 0, "jobs": 0}

    async def task(limiter: RateLimiter, n: int) -> None:
        for i in range(8):
            amounts = {"rps": 1, "jobs": 1} if (n + i) % 4 else {"rps": 1, "small": 1}
            before = clock()
            if await admit(limiter, "org", "api", amounts):
                spans.append((before, clock()))
                if "small" in amounts:
                    small_spans.append((before, clock()))
                for name, amount in amounts.items():
                    ledger[name] += amount
            clock.advance(5)  # time passes with the calls: 384 calls, about 1.9 s

    await asyncio.gather(*(task(limiters[n % 2], n) for n in range(48)))
    for repo in repos:
        await repo._admission.settle_splits()
    buckets = await repos[0].get_buckets("org", "api")
    assert ledger["jobs"] <= 60
    assert_every_interval(spans, capacity=20, per_second=20)
    assert_every_interval(small_spans, capacity=2, per_second=2)
    assert max(b.shard_count for b in buckets) > 1  # the knob forced splits
    for name in ledger:  # per-shard consumption is exactly what was admitted
        assert sum(b.total_consumed for b in buckets if b.limit_name == name) == ledger[name]
    clock.advance(seconds=10)  # every shard full again
    for _ in range(64):  # learn every shard, slower than the split trigger; then the warm cost
        assert await admit(limiters[0], "org", "api", {"rps": 1})
        clock.advance(250)
    await repos[0]._admission.settle_splits()
    with wire.block() as w:
        assert await admit(limiters[0], "org", "api", {"rps": 1})
    assert (w.round_trips, w.rcu, w.wcu) == (1, 0, 1)


def assert_every_interval(spans: list[tuple[int, int]], *, capacity: int, per_second: int) -> None:
    """For every interval [a, b]: the calls surely admitted inside it (started at or after a,
    returned by b) are at most capacity + refill over b - a."""
    starts = sorted({s for s, _ in spans})
    ends = sorted({e for _, e in spans})
    for a in starts:
        for b in ends:
            if b < a:
                continue
            inside = sum(1 for s, e in spans if s >= a and e <= b)
            assert inside <= capacity + per_second * (b - a) / 1000, (a, b, inside)
