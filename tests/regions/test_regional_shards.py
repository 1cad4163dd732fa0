"""Regional shards (docs/multi-region.md): a bucket several Regions write is split so each
writes only its own shards; a Region whose shards run dry takes capacity from another Region's
by an exactly-once transfer; the global quota is exact; a Region cut off never over-admits."""

from __future__ import annotations

import asyncio

import pytest
from region_support import MrscTable

from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
)
from zae_limiter.core import regions
from zae_limiter.dynamo import bucket_items, keys

REGIONS = ("us-east-1", "us-east-2", "us-west-2")


async def _admit(limiter: RateLimiter, entity: str, amounts: dict[str, int]) -> bool:
    try:
        async with limiter.acquire(entity, "api", amounts):
            return True
    except RateLimitExceeded:
        return False


async def _evidence(repo: Repository, entity: str, shards: int) -> dict[int, dict[str, int]]:
    """Per shard, the writers whose evidence it holds, with their last sequence there."""
    out: dict[int, dict[str, int]] = {}
    for shard in range(shards):
        item = await repo.scope.store.get(keys.bucket(repo.namespace_id, entity, "api", shard))
        assert item is not None
        out[shard] = dict(bucket_items.parse(item).evidence)
    return out


async def _shard_writers(repo: Repository, entity: str, shards: int) -> dict[int, set[int]]:
    """Per shard, the Regions of the writers whose evidence it holds."""
    return {
        shard: {r for w in seen if (r := regions.writer_region(w)) is not None}
        for shard, seen in (await _evidence(repo, entity, shards)).items()
    }


async def test_one_region_uses_the_whole_quota_through_transfers_and_not_a_unit_more(
    mrsc: MrscTable,
) -> None:
    east = await mrsc.open("us-east-2")  # Region 1 of 3: it owns shard 1 of 4 (a quarter)
    limiter = RateLimiter(east)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 300, cron="0 0 * * *")])
    assert await east.set_shards("org", "api", 4) == 4
    admitted = 0
    for _ in range(70):
        admitted += 5 * await _admit(limiter, "org", {"jobs": 5})
    assert admitted == 300  # all of it, from the other Regions' shards too: none lost
    assert not await _admit(limiter, "org", {"jobs": 1})  # and not one unit more
    writers = await _shard_writers(east, "org", 4)
    assert writers[1] == {1}  # only its own shard took this Region's calls
    assert transfers_taken(east) > 0
    assert mrsc.sim.total("transaction") == 0


def _knows(repo: Repository, entity: str, shards: int) -> bool:
    """This process's last image of the entity's bucket has `shards` shards."""
    images = repo.scope.admission.images
    seen = [images.get((repo.namespace_id, entity, "api", s)) for s in range(shards)]
    return any(hit is not None and hit[0].stamp.shards == shards for hit in seen)


def transfers_taken(repo: Repository) -> int:
    return repo.scope.admission.waves.transfers.moved


async def test_three_regions_split_a_shared_bucket_and_then_never_contend(
    mrsc: MrscTable,
) -> None:
    mrsc.sim.window_ms = 3_000  # 300 ms at the tests' scale: concurrent writes do collide
    repos = [await mrsc.open(region) for region in REGIONS]
    limiters = [RateLimiter(repo) for repo in repos]
    await limiters[0].set_resource_defaults("api", [Limit.per_second("rps", 1_000_000)])
    for limiter in limiters:  # without regional shards, three Regions on one item collide
        assert await _admit(limiter, "shared", {"rps": 1})
    regional = [
        (repo.scope.admission.regional, repo.scope.admission.shards.regional) for repo in repos
    ]
    for repo in repos:
        repo.scope.admission.regional = repo.scope.admission.shards.regional = None
    before = mrsc.sim.total("conflict")
    for _ in range(5):
        await asyncio.gather(*(_admit(limiter, "shared", {"rps": 1}) for limiter in limiters))
    assert mrsc.sim.total("conflict") > before  # measured: the item is contended
    for repo, (mine, chooser) in zip(repos, regional, strict=True):
        repo.scope.admission.regional, repo.scope.admission.shards.regional = mine, chooser
    for _ in range(6):  # each Region writes the one shard: they see each other's evidence
        for limiter in limiters:
            assert await _admit(limiter, "org", {"rps": 1})
    for repo in repos:
        await repo.scope.admission.settle_splits()
    shards = (await repos[0].get_buckets("org", "api"))[0].shard_count
    assert shards >= 4
    for repo, limiter in zip(repos, limiters, strict=True):  # until every process knows it
        for _ in range(10):
            assert await _admit(limiter, "org", {"rps": 1})
            if _knows(repo, "org", shards):
                break
        assert _knows(repo, "org", shards)
    await asyncio.sleep(2 * mrsc.sim.window_ms * mrsc.sim.scale / 1000)  # the last shared write
    before = mrsc.sim.total("conflict")
    conflicted = len(mrsc.sim.conflicted)
    seen_before = await _evidence(repos[0], "org", shards)
    writes = 0
    for _ in range(20):  # the steady state: every Region on its own shards
        results = await asyncio.gather(
            *(_admit(limiter, "org", {"rps": 1}) for limiter in limiters)
        )
        writes += sum(results)
    assert writes == 60
    seen_after = await _evidence(repos[0], "org", shards)
    for shard, after in seen_after.items():
        wrote = {w for w, seq in after.items() if seq != seen_before[shard].get(w)}
        assert {regions.writer_region(w) for w in wrote} <= {regions.owner(shard, 3)}, (
            shard,
            seen_before[shard],
            after,
        )
    assert mrsc.sim.conflicted[conflicted:] == []  # 0 conflicts on the hot path
    assert mrsc.sim.total("conflict") == before


async def test_a_region_cut_off_refuses_and_the_others_take_its_capacity(
    mrsc: MrscTable,
) -> None:
    deadlines = (5.0, 5.0, 0.5)  # the Region to be cut off answers within half a second
    repos = [
        await mrsc.open(region, acquire_timeout=t)
        for region, t in zip(REGIONS, deadlines, strict=True)
    ]
    limiters = [RateLimiter(repo) for repo in repos]
    await limiters[0].set_resource_defaults("api", [Limit.quota("jobs", 40, cron="0 0 * * *")])
    assert await repos[0].set_shards("org", "api", 4) == 4
    mrsc.sim.cut("us-west-2", 60)
    with pytest.raises(RateLimiterUnavailable):  # BLOCK: it commits nothing while cut off
        await _admit(limiters[2], "org", {"jobs": 1})
    degraded = await _admit_degraded(limiters[2])
    assert degraded  # ALLOW admits without writing, as documented: the user's choice
    admitted = 0
    for _ in range(30):
        for limiter in limiters[:2]:
            admitted += await _admit(limiter, "org", {"jobs": 1})
    assert admitted == 40  # the whole quota, the cut Region's shard included, and no more
    mrsc.sim.heal("us-west-2")
    healed = RateLimiter(await mrsc.open("us-west-2"))  # a new process there: nothing is left
    assert not await _admit(healed, "org", {"jobs": 1})


async def _admit_degraded(limiter: RateLimiter) -> bool:
    async with limiter.acquire("org", "api", {"jobs": 1}, on_unavailable=OnUnavailable.ALLOW):
        return True
