"""The wire recorder's counts for known sequences of raw DynamoDB calls on DynamoDB Local."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from support.tables import TableRef
from support.wire import WireRecorder, WireRequest, round_trips


def _add(table: str, pk: str, amount: int = 1, **extra: Any) -> dict[str, Any]:
    """UpdateItem: ADD n :amount on one small item (well under 1 KB)."""
    names = {"#n": "n"}
    values: dict[str, Any] = {":a": {"N": str(amount)}}
    sets = []
    for i, (attr, value) in enumerate(extra.items()):
        names[f"#x{i}"] = attr
        values[f":x{i}"] = {"S": value}
        sets.append(f"#x{i} = :x{i}")
    expression = "ADD #n :a" + (" SET " + ", ".join(sets) if sets else "")
    return {
        "TableName": table,
        "Key": {"PK": {"S": pk}, "SK": {"S": "#STATE"}},
        "UpdateExpression": expression,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


async def test_two_updates_sent_together_are_one_round_trip(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    async with wire.block() as w:
        await asyncio.gather(
            ddb_client.update_item(**_add(raw_table.name, "a")),
            ddb_client.update_item(**_add(raw_table.name, "b")),
        )
    assert w.by_operation == {"UpdateItem": 2}
    assert len(w.requests) == 2
    assert w.round_trips == 1
    assert w.wcu == 2
    assert w.rcu == 0
    assert w.index_wcu == 0
    # Every request asked for per-index capacity, so the table's share is reported separately.
    assert all(r.table_capacity == 1 and r.index_capacity == {} for r in w.requests)


async def test_sequential_updates_are_two_round_trips(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    with wire.block() as w:
        await ddb_client.update_item(**_add(raw_table.name, "a"))
        await ddb_client.update_item(**_add(raw_table.name, "a"))
    assert (len(w.requests), w.round_trips, w.rcu, w.wcu) == (2, 2, 0, 2)


async def test_failed_conditional_write_costs_one_wcu(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    request = _add(raw_table.name, "a")
    request["ConditionExpression"] = "attribute_exists(#n)"
    failure = ddb_client.exceptions.ConditionalCheckFailedException
    with wire.block() as w, pytest.raises(failure):
        await ddb_client.update_item(**request)
    [failed] = w.requests
    assert failed.conditional_failure and failed.failed
    assert failed.error_code == "ConditionalCheckFailedException"
    assert failed.reported_total == 0  # DynamoDB Local reports nothing for it
    assert (w.round_trips, w.rcu, w.wcu) == (1, 0, 1)


async def test_two_item_transaction_costs_four_wcu(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    items = [{"Update": _add(raw_table.name, pk)} for pk in ("a", "b")]
    with wire.block() as w:
        await ddb_client.transact_write_items(TransactItems=items)
    [transaction] = w.requests
    assert transaction.items == 2
    assert (w.round_trips, w.rcu, w.wcu) == (1, 0, 4)


async def test_cancelled_transaction_keeps_reasons_and_counts_its_items(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    check = {
        "ConditionCheck": {
            "TableName": raw_table.name,
            "Key": {"PK": {"S": "missing"}, "SK": {"S": "#STATE"}},
            "ConditionExpression": "attribute_exists(PK)",
        }
    }
    items = [check, {"Update": _add(raw_table.name, "a")}]
    cancelled_error = ddb_client.exceptions.TransactionCanceledException
    with wire.block() as w, pytest.raises(cancelled_error):
        await ddb_client.transact_write_items(TransactItems=items)
    [cancelled] = w.requests
    assert cancelled.transaction_cancelled
    assert cancelled.cancellation_codes == ["ConditionalCheckFailed", "None"]
    assert w.wcu == 4


async def test_index_writes_are_counted_per_index(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    # An item that appears in GSI1 (both of its key attributes are set) costs a write there too.
    request = _add(raw_table.name, "child", GSI1PK="parent", GSI1SK="child")
    with wire.block() as w:
        await ddb_client.update_item(**request)
    [update] = w.requests
    assert update.table_capacity == 1
    assert update.index_capacity == {"GSI1": 1}
    assert (w.wcu, w.index_wcu) == (2, 1)


async def test_reads_count_reported_rcu(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    await ddb_client.update_item(**_add(raw_table.name, "a"))
    key = {"PK": {"S": "a"}, "SK": {"S": "#STATE"}}
    with wire.block() as w:
        await ddb_client.get_item(TableName=raw_table.name, Key=key)
        await ddb_client.get_item(TableName=raw_table.name, Key=key, ConsistentRead=True)
    assert [r.rcu for r in w.requests] == [0.5, 1.0]
    assert (w.round_trips, w.rcu, w.wcu) == (2, 1.5, 0)


async def test_nothing_is_recorded_or_injected_outside_a_block(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    with wire.block() as w:
        pass
    response = await ddb_client.update_item(**_add(raw_table.name, "a"))
    assert "ConsumedCapacity" not in response
    assert w.requests == []


async def test_nested_blocks_both_see_inner_calls(
    ddb_client: Any, raw_table: TableRef, wire: WireRecorder
) -> None:
    with wire.block() as outer:
        await ddb_client.update_item(**_add(raw_table.name, "a"))
        with wire.block() as inner:
            await ddb_client.update_item(**_add(raw_table.name, "b"))
        with wire.paused():
            await ddb_client.update_item(**_add(raw_table.name, "c"))
    assert (outer.round_trips, outer.wcu) == (2, 2)
    assert (inner.round_trips, inner.wcu) == (1, 1)


async def test_clients_created_later_are_recorded(
    ddb_endpoint: str, raw_table: TableRef, wire: WireRecorder
) -> None:
    from aiobotocore.session import get_session

    from support.fixtures import local_client_kwargs

    async with get_session().create_client("dynamodb", **local_client_kwargs(ddb_endpoint)) as c:
        with wire.block() as w:
            await c.update_item(**_add(raw_table.name, "a"))
    assert (len(w.requests), w.wcu) == (1, 1)


def _request(start: float, end: float, attempts: int = 1) -> WireRequest:
    return WireRequest(operation="UpdateItem", start=start, end=end, attempts=attempts)


def test_round_trips_are_the_longest_chain_of_sequential_calls() -> None:
    assert round_trips([]) == 0
    # Two overlapping calls, then one after both: 2 waves.
    assert round_trips([_request(0, 2), _request(1, 3), _request(4, 5)]) == 2
    # A call that starts after the first ends but overlaps the second still chains on the first.
    assert round_trips([_request(0, 1), _request(0.5, 3), _request(2, 4)]) == 2
    # A retried call counts one round trip per attempt.
    assert round_trips([_request(0, 1, attempts=3), _request(2, 3)]) == 4
