"""The three-Region simulation (tests/support/regions.py) behaves as an MRSC global table does:
what DescribeTable says, transactions and TTL refused, conflicts between Regions (never
applied, decided by request identity), latency by Region, and a Region cut off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import ClientError, ReadTimeoutError
from region_support import MrscTable

from support.fixtures import local_client_kwargs
from support.regions import CONFLICT, TRANSACTIONS_REFUSED, Regions, regions
from zae_limiter.dynamo import codec

KEY = {"PK": {"S": "item"}, "SK": {"S": "x"}}


@pytest.fixture
async def clients(sim: Regions) -> AsyncIterator[dict[str, Any]]:
    """A raw client per Region (no retries, short read timeout)."""
    out: dict[str, Any] = {}
    session = get_session()
    creators = []
    for name in sim.names:
        kwargs = local_client_kwargs(sim.url(name))
        kwargs["config"] = AioConfig(
            retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=0.5
        )
        creator = session.create_client("dynamodb", **kwargs)
        out[name] = await creator.__aenter__()
        creators.append(creator)
    yield out
    for creator in creators:
        await creator.__aexit__(None, None, None)


async def _add(client: Any, table: str) -> None:
    await client.update_item(
        TableName=table,
        Key=KEY,
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )


async def _n(client: Any, table: str) -> int:
    item = (await client.get_item(TableName=table, Key=KEY, ConsistentRead=True)).get("Item")
    return int(codec.decode_item(item)["n"]) if item else 0  # type: ignore[index]


async def test_describe_table_reports_strong_consistency_and_every_replica(
    mrsc: MrscTable, clients: dict[str, Any]
) -> None:
    east2 = clients["us-east-2"]
    described = (await east2.describe_table(TableName=mrsc.name))["Table"]
    assert described["MultiRegionConsistency"] == "STRONG"
    assert {r["RegionName"] for r in described["Replicas"]} == {"us-east-1", "us-west-2"}
    ttl = (await east2.describe_time_to_live(TableName=mrsc.name))["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "DISABLED"


async def test_every_transaction_api_and_ttl_are_refused_and_nothing_is_applied(
    mrsc: MrscTable, clients: dict[str, Any]
) -> None:
    client = clients["us-east-1"]
    put = {"Put": {"TableName": mrsc.name, "Item": {**KEY, "n": {"N": "1"}}}}
    calls = {
        "TransactWriteItems": client.transact_write_items(TransactItems=[put]),
        "TransactGetItems": client.transact_get_items(
            TransactItems=[{"Get": {"TableName": mrsc.name, "Key": KEY}}]
        ),
        "ExecuteTransaction": client.execute_transaction(
            TransactStatements=[{"Statement": f'SELECT * FROM "{mrsc.name}"'}]
        ),
        "UpdateTimeToLive": client.update_time_to_live(
            TableName=mrsc.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"},
        ),
    }
    for name, call in calls.items():
        with pytest.raises(ClientError) as refused:
            await call
        error = refused.value.response["Error"]
        assert error["Code"] == TRANSACTIONS_REFUSED[0], name
        assert "multi-Region strong consistency" in error["Message"], name
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert await _n(client, mrsc.name) == 0
    assert mrsc.sim.total("transaction") == 3


async def test_two_regions_writing_one_item_conflict_and_the_loser_is_not_applied(
    ddb_endpoint: str, mrsc: MrscTable
) -> None:
    async with regions(ddb_endpoint, seed=3, window_ms=60_000, scale=0.01) as sim:
        session = get_session()
        kwargs = {
            name: {
                **local_client_kwargs(sim.url(name)),
                "config": AioConfig(retries={"mode": "standard", "total_max_attempts": 1}),
            }
            for name in ("us-east-1", "us-west-2")
        }
        async with (
            session.create_client("dynamodb", **kwargs["us-east-1"]) as east,
            session.create_client("dynamodb", **kwargs["us-west-2"]) as west,
        ):
            await _add(east, mrsc.name)
            await _add(east, mrsc.name)  # the same Region again: no conflict
            with pytest.raises(ClientError) as conflict:
                await _add(west, mrsc.name)  # within the window, from another Region
            response = conflict.value.response
            assert response["Error"]["Code"] == CONFLICT[0]
            assert "being modified by a request in another Region" in response["Error"]["Message"]
            assert response["ResponseMetadata"]["HTTPStatusCode"] == 400
            assert await _n(east, mrsc.name) == 2  # the conflicting write was not applied
            with pytest.raises(ClientError):
                await _add(west, mrsc.name)  # the same request again: its second draw
            await _add(west, mrsc.name)  # its third attempt always gets through
            assert await _n(west, mrsc.name) == 3
        assert sim.counts["us-west-2"]["conflict"] == 2


async def test_whether_an_overlap_conflicts_depends_on_the_request_not_the_order(
    ddb_endpoint: str,
) -> None:
    bodies = [f'{{"Key": {i}}}'.encode() for i in range(40)]
    decisions = []
    for order in (bodies, list(reversed(bodies))):
        sim = Regions(ddb_endpoint, seed=11, conflict_rate=0.5)
        key = ("t", "item", "x")
        sim.claim("us-east-1", "UpdateItem", b"holder", [key])  # another Region holds the item
        decided = {body: sim.claim("us-west-2", "UpdateItem", body, [key]) for body in order}
        decisions.append(decided)
    assert decisions[0] == decisions[1]
    assert 0 < sum(decisions[0].values()) < len(bodies)  # a seeded mix of both


async def test_a_write_waits_for_the_nearest_other_region_and_a_read_does_not(
    mrsc: MrscTable, clients: dict[str, Any]
) -> None:
    sim = mrsc.sim
    before = dict(sim.counts["us-east-1"])
    await _add(clients["us-east-1"], mrsc.name)
    write_us = sim.counts["us-east-1"]["delay_us"] - before.get("delay_us", 0)
    assert write_us == round(2 * sim.scale * 1000) + round(15 * sim.scale * 1000)  # + us-east-2
    before_read = sim.counts["us-west-2"]["delay_us"]
    await clients["us-west-2"].get_item(TableName=mrsc.name, Key=KEY)  # eventually consistent
    assert sim.counts["us-west-2"]["delay_us"] - before_read == round(2.0 * sim.scale * 1000)


async def test_a_region_cut_off_commits_nothing_and_the_others_go_on(
    mrsc: MrscTable, clients: dict[str, Any]
) -> None:
    sim = mrsc.sim
    sim.cut("us-west-2", 30)
    with pytest.raises(ReadTimeoutError):
        await _add(clients["us-west-2"], mrsc.name)
    await clients["us-west-2"].get_item(TableName=mrsc.name, Key=KEY)  # still served
    await _add(clients["us-east-1"], mrsc.name)  # the other two still form a quorum
    before = sim.counts["us-east-2"]["delay_us"]
    await _add(clients["us-east-2"], mrsc.name)
    assert sim.counts["us-east-2"]["delay_us"] - before == round(2 * sim.scale * 1000) + round(
        15 * sim.scale * 1000
    )
    await asyncio.sleep(0.6)  # the cut region's held write was dropped, never applied
    assert await _n(clients["us-east-1"], mrsc.name) == 2
    sim.heal("us-west-2")
    await _add(clients["us-west-2"], mrsc.name)
    assert await _n(clients["us-west-2"], mrsc.name) == 3
    assert sim.counts["us-west-2"]["cut"] == 1
