"""A fleet of writers on DynamoDB Local (docs/on-unavailable.md "A fleet of writers", §6).

Writers are simulated as in tests/behaviour/test_item_size.py: one Repository taking a new writer
id (and holds ledger) between writes, so each leaves its entries exactly as another process
would. The figures with real repositories, one per writer, are `make bench`'s fleet phase.
"""

from __future__ import annotations

from typing import Any

from support.clock import FakeClock
from support.item_size import item_size
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.acquire import holds_seen
from zae_limiter.core import evidence as rules
from zae_limiter.core.images import new_writer_id
from zae_limiter.dynamo import keys

BOUND = rules.MAX_ENTRIES + rules.MAX_REMOVED


def become_new_writer(repo: Repository) -> str:
    """The repository's acquire path as a new process's: a new writer id and holds ledger."""
    admission = repo._admission
    lanes = admission.waves.lanes
    lanes.writer = new_writer_id()
    lanes.ledger = admission.ledger = holds_seen.ledger_for(lanes.writer)
    return lanes.writer


async def stored(repo: Repository, entity: str, resource: str) -> dict[str, Any]:
    """The bucket item as stored, in wire form (consistent read)."""
    key = keys.bucket(repo._ns, entity, resource, 0)
    response = await repo.transport.client.get_item(
        TableName=repo.table_name,
        Key={"PK": {"S": key["PK"]}, "SK": {"S": key["SK"]}},
        ConsistentRead=True,
    )
    item: dict[str, Any] = response["Item"]
    return item


async def fleet_repo(table: TableRef, clock: FakeClock) -> tuple[Repository, RateLimiter]:
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults(
        "api", [Limit.per_minute("rpm", 10**9), Limit.per_minute("tpm", 10**12)]
    )
    await limiter.create_entity(entity_id="org")
    await limiter.create_entity(entity_id="user", parent_id="org")
    await repo.set_resource_cascade("api", True)
    await limiter.set_limits("org", [Limit.per_minute("tpm", 10**12)], resource="api")
    return repo, limiter


async def test_a_fleet_keeps_items_bounded_and_a_warm_cascade_at_two_wcu_an_item(
    table: TableRef, clock: FakeClock, wire: Any
) -> None:
    """120 writers at one instant, then 60 more spread over a minute: the user's and the
    organisation's items keep at most the bound, and a fresh writer's warm cascade costs at
    most 2 WCU an item, 1 round trip, no read."""
    repo, limiter = await fleet_repo(table, clock)
    try:
        for n in range(180):
            if n >= 120:
                clock.advance(1_000)
            become_new_writer(repo)
            async with limiter.acquire("user", "api", {"rpm": 1, "tpm": 10}):
                pass
            for entity in ("user", "org"):
                assert len((await stored(repo, entity, "api"))["ew"]["M"]) <= BOUND
        become_new_writer(repo)
        async with limiter.acquire("user", "api", {"rpm": 1, "tpm": 10}):
            pass  # its first write to the items
        with wire.block() as w:
            async with limiter.acquire("user", "api", {"rpm": 1, "tpm": 10}):
                pass
        assert (w.round_trips, w.rcu) == (1, 0)
        assert w.wcu <= 2 * 2
        sizes = [item_size(await stored(repo, e, "api")) for e in ("user", "org")]
        assert max(sizes) <= 2048
        for state in await repo.get_buckets("user"):
            assert state.total_consumed == 182 * (1 if state.limit_name == "rpm" else 10)
        item = await stored(repo, "user", "api")
        assert int(item["ef"]["N"]) > 0  # entries were removed to make room: the floor rose
    finally:
        await repo.close()


async def test_a_late_copy_of_a_write_whose_entry_was_removed_never_lands(
    table: TableRef, clock: FakeClock, wire: Any
) -> None:
    """The exact request of a writer's first write, sent again after other writers removed its
    entry to make room (leaving room): refused by the floor."""
    repo, limiter = await fleet_repo(table, clock)
    try:
        async with limiter.acquire("org", "api", {"tpm": 5}):
            pass  # the item exists
        first_writer = become_new_writer(repo)
        with wire.block() as w:
            async with limiter.acquire("org", "api", {"tpm": 5}):
                pass
        [first] = [r for r in w.requests if r.operation == "UpdateItem"]
        for _ in range(rules.MAX_ENTRIES - 2):  # the item full
            become_new_writer(repo)
            async with limiter.acquire("org", "api", {"tpm": 1}):
                pass
        clock.advance(rules.EVICT_AGE_MS + 1_000)
        become_new_writer(repo)
        async with limiter.acquire("org", "api", {"tpm": 1}):
            pass  # makes room: the oldest go, the first writer's among them
        item = await stored(repo, "org", "api")
        assert first_writer not in item["ew"]["M"]
        assert len(item["ew"]["M"]) < rules.MAX_ENTRIES  # room: the floor alone refuses
        [state] = await repo.get_buckets("org")
        before = state.total_consumed
        params = {k: v for k, v in first.params.items() if k != "ReturnConsumedCapacity"}
        client = repo.transport.client
        try:
            await client.update_item(**params)
        except client.exceptions.ConditionalCheckFailedException:
            pass
        else:
            raise AssertionError("a late copy of a write landed again")
        [state] = await repo.get_buckets("org")
        assert state.total_consumed == before
    finally:
        await repo.close()


async def test_an_item_written_before_the_map_gets_one_and_keeps_young_old_entries(
    table: TableRef, clock: FakeClock
) -> None:
    """Items stored with one top-level entry per writer: the next write makes the map, leaves
    the young entries (their writers may still re-send), removes the ones past the prune age."""
    repo, limiter = await fleet_repo(table, clock)
    try:
        async with limiter.acquire("org", "api", {"tpm": 5}):
            pass
        key = keys.bucket(repo._ns, "org", "api", 0)
        now = clock()
        await repo.transport.client.update_item(
            TableName=repo.table_name,
            Key={"PK": {"S": key["PK"]}, "SK": {"S": key["SK"]}},
            UpdateExpression="SET #young = :young, #old = :old REMOVE ew",
            ExpressionAttributeNames={"#young": "~youngwrt", "#old": "~oldwritr"},
            ExpressionAttributeValues={
                ":young": {"N": str(now - 1_000)},
                ":old": {"N": str(now - rules.PRUNE_AGE_MS - 1_000)},
            },
        )
        writer = become_new_writer(repo)
        async with limiter.acquire("org", "api", {"tpm": 5}):
            pass
        item = await stored(repo, "org", "api")
        assert set(item["ew"]["M"]) == {writer}
        assert "~youngwrt" in item and "~oldwritr" not in item
        [state] = await repo.get_buckets("org")
        assert state.total_consumed == 10
    finally:
        await repo.close()


async def test_released_holds_leave_no_entry(table: TableRef, clock: FakeClock) -> None:
    """100 writers that each took a concurrency hold and gave it back leave no hold entry (today
    5.2 KB: one released entry per writer until it expired); the item stays under 2 KB."""
    repo = await Repository.open(
        table=table.name, endpoint_url=table.endpoint_url, region=table.region, clock=clock
    )
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("llm", [Limit.concurrent("par", 1000)])
    try:
        for _ in range(100):
            become_new_writer(repo)
            async with limiter.acquire("key-1", "llm", {"par": 1}) as lease:
                pass
            assert not lease.hold_lost
        item = await stored(repo, "key-1", "llm")
        limit = item["L"]["M"]["par"]["M"]
        assert limit["h"]["M"] == {} and limit["he"]["M"] == {}
        assert limit["v"]["N"] == "0"
        assert item_size(item) < 2048
        print("item bytes after 100 writers held and gave back:", item_size(item))
    finally:
        await repo.close()
