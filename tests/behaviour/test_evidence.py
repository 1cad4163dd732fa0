"""Writer evidence on DynamoDB Local (docs/on-unavailable.md, "Exactly once").

The interleavings that broke the four-slot guard: a write lands, its answer is lost, k other
writers write the item before the re-send; the re-send must still find that it landed. Also: a
write whose every re-send lost its answer is decided by reading the writer's entry, a late copy
of a write cannot land after its fence, and idle writers' entries are pruned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from behaviour.test_unknown_outcomes import LoseResponses
from support.clock import FakeClock
from support.faultproxy import fault_proxy
from support.ledger import open_behind
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, Repository
from zae_limiter.acquire.lanes import UNKNOWN_RESENDS
from zae_limiter.core.images import new_writer_id
from zae_limiter.dynamo import keys
from zae_limiter.dynamo.bucket_attributes import EVIDENCE


@pytest.mark.parametrize("others", [1, 4, 16, 64])
async def test_a_lost_write_is_found_after_k_other_writes(open_repo: Any, others: int) -> None:
    mine, theirs = await open_repo(), await open_repo()
    me, other = RateLimiter(mine), RateLimiter(theirs)
    await me.set_resource_defaults("api", [Limit.per_hour("units", 100_000)])
    for limiter in (me, other):
        async with limiter.acquire("u", "api", {"units": 1}):
            pass  # both warm
    lanes = theirs._admission.waves.lanes

    async def others_write() -> None:
        for _ in range(others):
            lanes.writer = new_writer_id()  # each write by another writer
            async with other.acquire("u", "api", {"units": 1}):
                pass

    with LoseResponses(mine, between=others_write) as lose:
        async with me.acquire("u", "api", {"units": 100}, timeout=None):
            pass
    assert lose.lost == 1
    [state] = await mine.get_buckets("u")
    assert state.total_consumed == 2 + others + 100  # the lost write counted once


async def test_a_write_whose_every_re_send_lost_its_answer_is_decided_by_reading_it(
    table: TableRef, clock: FakeClock
) -> None:
    """Before: "write outcome undecided after 9 lost answers", the call refused and its debit
    left in place. The writer's entry on the item decides it with one consistent read."""
    admin = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    await admin.set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    async with fault_proxy(
        table.endpoint_url,
        seed=1,
        rate=1.0,
        kinds=("lost",),
        operations=("UpdateItem",),
        max_faults=UNKNOWN_RESENDS + 1,
        max_per_request=UNKNOWN_RESENDS + 1,  # every re-send of the one write is lost
    ) as proxy:
        async with RateLimiter(admin).acquire("u", "api", {"units": 1}):
            pass  # the item exists (written around the proxy): the next write is an update
        repo = await Repository.open(
            table=table.name,
            endpoint_url=proxy.url,
            region=table.region,
            clock=clock,
            acquire_timeout=None,  # the caller waits for the re-sends: they are what is tested
        )
        with pytest.raises(RateLimiterUnavailable, match="decided off the caller's path"):
            async with RateLimiter(repo).acquire("u", "api", {"units": 10}):
                pass  # the caller is told once re-sending kept failing
        await repo.close()  # the read decides: it had landed, so it is refunded
        stats = repo.get_cache_stats()
    assert proxy.counts["lost"] == UNKNOWN_RESENDS + 1
    assert (stats.undecided_writes, stats.resolved_by_read) == (0, 1)
    assert stats.refunded_after_deadline == 1
    [state] = await admin.get_buckets("u")
    assert state.total_consumed == 1  # landed once, refunded once
    await admin.close()


@pytest.mark.parametrize("tasks", [1, 8])
async def test_late_copies_of_a_write_never_land_twice(table: TableRef, tasks: int) -> None:
    """Writes held past the read timeout land after their re-send (and after fences)."""
    admin = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region
    )
    await admin.set_resource_defaults("api", [Limit.per_hour("units", 1_000_000)])
    async with fault_proxy(
        table.endpoint_url,
        seed=5,
        rate=0.2,
        kinds=("late",),
        delay_s=1.2,
        max_faults=12,
        at_least=1,  # 8 tasks fold their calls into few writes: a run could draw none
    ) as proxy:
        repos = [await open_behind(proxy.url, table.name, read_timeout=1.0) for _ in range(2)]
        done = 0

        async def task(limiter: RateLimiter) -> None:
            nonlocal done
            for _ in range(24 // tasks):
                async with limiter.acquire("u", "api", {"units": 1}):
                    done += 1

        await asyncio.gather(*(task(RateLimiter(r)) for r in repos for _ in range(tasks)))
        await asyncio.sleep(1.5)  # every held copy has been forwarded by now
        for repo in repos:
            await repo.close()
    assert proxy.counts["late"] > 0
    [state] = await admin.get_buckets("u")
    assert state.total_consumed == done
    await admin.close()


async def test_idle_writers_entries_are_pruned(open_repo: Any, clock: FakeClock) -> None:
    old, recent, new = await open_repo(), await open_repo(), await open_repo()
    await RateLimiter(old).set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    for repo, wait_minutes in ((old, 0), (recent, 4), (new, 1)):
        clock.advance(minutes=wait_minutes)
        async with RateLimiter(repo).acquire("u", "api", {"units": 1}):
            pass
    entries = await evidence_on(new, "u", "api")
    ids = {r: r._admission.waves.lanes.writer for r in (old, recent, new)}
    assert set(entries) == {ids[old], ids[recent], ids[new]}
    clock.advance(minutes=2)  # old: 7 min idle, recent: 3 min
    async with RateLimiter(new).acquire("u", "api", {"units": 1}):
        pass
    assert set(await evidence_on(new, "u", "api")) == {ids[recent], ids[new]}
    async with RateLimiter(old).acquire("u", "api", {"units": 1}):
        pass  # a pruned writer writes again as if new
    [state] = await new.get_buckets("u")
    assert state.total_consumed == 5


async def evidence_on(repo: Repository, entity: str, resource: str) -> dict[str, int]:
    key = keys.bucket(repo._ns, entity, resource, 0)
    item = await repo._store.get(key)
    assert item is not None
    return {writer: int(seq) for writer, seq in item.get(EVIDENCE, {}).items()}
