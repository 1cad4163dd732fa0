"""The simulated table against DynamoDB Local: every request of a simulated history, sent again
in the same order to DynamoDB Local, gets the same answer there, and both end with the same items.

The simulation's table is a model of DynamoDB written for it (tests/support/sim/table.py); this
test is what keeps it honest for the requests the library makes (bucket debits with their
guards and evidence, fences, creates and replaces, config and entity writes, transactions,
queries), and the recorded histories (tests/histories/) stay the check of the library's
behaviour on DynamoDB Local itself.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from support.sim.network import Faults
from support.sim.plans import ci
from support.sim.table import Refused, SimTable
from support.sim.world import TABLE, simulate
from zae_limiter.dynamo.failures import ConditionFailed, Rejected, TransactionCancelled
from zae_limiter.dynamo.transport import DynamoError, Transport

IGNORED = {"ConsumedCapacity", "ResponseMetadata", "ItemCollectionMetrics"}


def _renamed(request: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The request (or answer) with the table name `old` replaced by `new`."""
    return json.loads(json.dumps(request).replace(f'"{old}"', f'"{new}"'))  # type: ignore[no-any-return]


def _local_answer(error: DynamoError) -> tuple[str, Any]:
    if isinstance(error, ConditionFailed):
        return "ConditionalCheckFailedException", error.item
    if isinstance(error, TransactionCancelled):
        return "TransactionCanceledException", [r.get("Code") for r in error.reasons]
    if isinstance(error, Rejected):
        return error.code, None
    return type(error).__name__, None


def _model_answer(refused: Refused) -> tuple[str, Any]:
    from zae_limiter.dynamo import codec

    if refused.code == "ConditionalCheckFailedException":
        return refused.code, codec.decode_item(refused.extra.get("Item"))
    if refused.code == "TransactionCanceledException":
        return refused.code, [r["Code"] for r in refused.extra["CancellationReasons"]]
    return refused.code, None


async def test_a_simulated_history_gets_the_same_answers_from_dynamodb_local(
    ddb_endpoint: str, table_name: str
) -> None:
    table = SimTable(lambda: 0)
    table.recording = []
    # Faults that change what is sent (lost answers, re-sends) are in: the model answered each
    # request it received; those never received (throttled, refused) are not replayed.
    plan = replace(ci(7), faults=replace(Faults(), rate=0.2))
    result = await asyncio.to_thread(simulate, plan, table)  # its own loop, in its own thread
    assert result.problems == []
    recording = table.recording
    operations = {operation for operation, _, _ in recording}
    assert {"CreateTable", "UpdateItem", "PutItem", "TransactWriteItems", "BatchGetItem",
            "Query", "GetItem"} <= operations, operations  # fmt: skip
    transport = await Transport.connect(region="us-east-1", endpoint_url=ddb_endpoint)
    differences = []
    try:
        for number, (operation, request, answer) in enumerate(recording):
            sent = _renamed(request, TABLE, table_name)
            try:
                got: Any = await transport.call(operation, sent)
            except DynamoError as error:
                got = _local_answer(error)
            expected: Any = (
                _model_answer(answer)
                if isinstance(answer, Refused)
                else {k: v for k, v in answer.items() if k not in IGNORED}
            )
            if isinstance(got, dict):
                got = {k: v for k, v in got.items() if k not in IGNORED}
                if operation in ("CreateTable", "DescribeTable", "DeleteTable"):
                    got = expected = None  # descriptions differ in details we never read
                else:
                    got = _renamed(got, table_name, TABLE)
            if operation == "BatchGetItem":  # answered in any order
                for answered in (got, expected):
                    if isinstance(answered, dict):
                        for items in answered["Responses"].values():
                            items.sort(key=_key)
            if got != expected:
                differences.append((number, operation, request, expected, got))
        stored = await transport.call("Scan", {"TableName": table_name})
    finally:
        await transport.close()
    print(f"{len(recording)} requests replayed ({sorted(operations)}), "
          f"{len(differences)} differences")  # fmt: skip
    assert differences[:3] == []
    model = sorted(table.table(TABLE).items(), key=_key)
    local = sorted(stored["Items"], key=_key)
    assert local == model


def _key(item: dict[str, Any]) -> tuple[str, str]:
    return item["PK"]["S"], item["SK"]["S"]
