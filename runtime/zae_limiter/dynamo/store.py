"""Every DynamoDB request the library makes, except hot-path bucket writes' bodies (bucket_items).

A `Store` is bound to one transport and table. Methods take and return plain items. On a table
with multi-Region strong consistency (`multi_region`, set when the repository opens it) there is
no transaction: `transact` writes one item at a time (`dynamo.sequenced`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..gathering import gather_or_end
from ..schema import PARTITION_KEY, SORT_KEY
from . import codec, sequenced
from .multi_region import MultiRegion
from .transport import DynamoUnavailable, Transport

BATCH_GET_MAX = 100
TRANSACT_MAX = 100
BATCH_WRITE_MAX = 25


class Store:
    def __init__(self, transport: Transport, table: str) -> None:
        self.transport = transport
        self.table = table
        #: The table's Regions when it has multi-Region strong consistency (no transactions).
        self.multi_region: MultiRegion | None = None

    @property
    def sequential(self) -> bool:
        """Multi-item changes go one item at a time (an MRSC table refuses transactions)."""
        return self.multi_region is not None

    # --- single items --------------------------------------------------------------------------

    async def get(self, key: dict[str, str], *, consistent: bool = True) -> dict[str, Any] | None:
        response = await self.transport.call(
            "GetItem",
            {"TableName": self.table, "Key": codec.encode_item(key), "ConsistentRead": consistent},
        )
        return codec.decode_item(response.get("Item"))

    async def put(
        self,
        item: dict[str, Any],
        *,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        values: dict[str, Any] | None = None,
    ) -> None:
        request: dict[str, Any] = {"TableName": self.table, "Item": codec.encode_item(item)}
        _conditions(request, condition, names, values)
        await self.transport.call("PutItem", request, write=True)

    async def update(
        self,
        key: dict[str, str],
        expression: str,
        *,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        values: dict[str, Any] | None = None,
        return_new: bool = True,
    ) -> dict[str, Any] | None:
        request: dict[str, Any] = {
            "TableName": self.table,
            "Key": codec.encode_item(key),
            "UpdateExpression": expression,
            "ReturnValues": "ALL_NEW" if return_new else "NONE",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        _conditions(request, condition, names, values)
        response = await self.transport.call("UpdateItem", request, write=True)
        return codec.decode_item(response.get("Attributes"))

    async def delete(self, key: dict[str, str]) -> None:
        await self.transport.call(
            "DeleteItem", {"TableName": self.table, "Key": codec.encode_item(key)}, write=True
        )

    async def send_update(self, request: dict[str, Any]) -> dict[str, Any]:
        """A prepared UpdateItem (bucket writes); returns the new item in wire form."""
        response = await self.transport.call("UpdateItem", request, write=True)
        item: dict[str, Any] | None = response.get("Attributes")
        assert item is not None
        return item

    # --- many items ----------------------------------------------------------------------------

    async def batch_get(
        self, keys: Sequence[dict[str, str]], *, consistent: bool = True
    ) -> list[dict[str, Any]]:
        """Every existing item among `keys` (any order), in as few requests as possible."""
        unique = list({(k[PARTITION_KEY], k[SORT_KEY]): k for k in keys}.values())
        chunks = [unique[i : i + BATCH_GET_MAX] for i in range(0, len(unique), BATCH_GET_MAX)]
        results = await gather_or_end(*(self._batch_get_chunk(c, consistent) for c in chunks))
        return [item for chunk in results for item in chunk]

    async def _batch_get_chunk(
        self, keys: list[dict[str, str]], consistent: bool
    ) -> list[dict[str, Any]]:
        if len(keys) == 1:
            item = await self.get(keys[0], consistent=consistent)
            return [item] if item else []
        pending: dict[str, Any] = {
            self.table: {
                "Keys": [codec.encode_item(k) for k in keys],
                "ConsistentRead": consistent,
            }
        }
        found: list[dict[str, Any]] = []
        for _ in range(8):
            response = await self.transport.call("BatchGetItem", {"RequestItems": pending})
            for wire in response.get("Responses", {}).get(self.table, []):
                item = codec.decode_item(wire)
                assert item is not None
                found.append(item)
            pending = response.get("UnprocessedKeys") or {}
            if not pending:
                break
        return found

    async def query(
        self,
        pk_value: str,
        *,
        index: str | None = None,
        sk_prefix: str | None = None,
        consistent: bool = False,
        limit: int | None = None,
        start_key: dict[str, Any] | None = None,
        newest_first: bool = False,
        sk_between: tuple[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One page of a query on the table or an index."""
        pk_name = f"{index}PK" if index else PARTITION_KEY
        sk_name = f"{index}SK" if index else SORT_KEY
        names = {"#pk": pk_name}
        values: dict[str, Any] = {":pk": codec.encode(pk_value)}
        condition = "#pk = :pk"
        if sk_prefix is not None:
            names["#sk"] = sk_name
            values[":sk"] = codec.encode(sk_prefix)
            condition += " AND begins_with(#sk, :sk)"
        elif sk_between is not None:
            names["#sk"] = sk_name
            values[":lo"] = codec.encode(sk_between[0])
            values[":hi"] = codec.encode(sk_between[1])
            condition += " AND #sk BETWEEN :lo AND :hi"
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": not newest_first,
        }
        if index:
            request["IndexName"] = index
        else:
            request["ConsistentRead"] = consistent
        if limit:
            request["Limit"] = limit
        if start_key:
            request["ExclusiveStartKey"] = start_key
        response = await self.transport.call("Query", request)
        items = [codec.decode_item(w) for w in response.get("Items", [])]
        return [i for i in items if i is not None], response.get("LastEvaluatedKey")

    async def scan(
        self, *, limit: int | None = None, start_key: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One page of a Scan of the table (eventually consistent): the sweeper's walk."""
        request: dict[str, Any] = {"TableName": self.table}
        if limit:
            request["Limit"] = limit
        if start_key:
            request["ExclusiveStartKey"] = start_key
        response = await self.transport.call("Scan", request)
        items = [codec.decode_item(w) for w in response.get("Items", [])]
        return [i for i in items if i is not None], response.get("LastEvaluatedKey")

    async def query_all(self, pk_value: str, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: dict[str, Any] | None = None
        while True:
            page, start = await self.query(pk_value, start_key=start, **kwargs)
            items += page
            if not start:
                return items

    async def transact(self, operations: list[dict[str, Any]], *, token: str | None = None) -> None:
        """TransactWriteItems. Each operation is {"Put"|"Update"|"Delete"|"ConditionCheck": {...}}
        with plain items/keys; TableName is added here. On an MRSC table: `sequenced.run`, with
        the same meaning (all or none, exactly once, the same cancellation)."""
        wire_ops = []
        for op in operations:
            ((kind, body),) = op.items()
            body = dict(body)
            body["TableName"] = self.table
            if "Item" in body:
                body["Item"] = codec.encode_item(body["Item"])
            if "Key" in body:
                body["Key"] = codec.encode_item(body["Key"])
            if "ExpressionAttributeValues" in body:
                body["ExpressionAttributeValues"] = {
                    k: codec.encode(v) for k, v in body["ExpressionAttributeValues"].items()
                }
            body.setdefault("ReturnValuesOnConditionCheckFailure", "ALL_OLD")
            wire_ops.append({kind: body})
        if self.sequential:
            await sequenced.run(self, wire_ops, token)
            return
        request: dict[str, Any] = {"TransactItems": wire_ops}
        if token:
            request["ClientRequestToken"] = token
        # With a client token a retry after an unknown outcome is idempotent (10 minutes).
        await self.transport.call("TransactWriteItems", request, write=token is None)

    async def batch_put(self, items: Sequence[dict[str, Any]]) -> None:
        """Write every item (unconditional puts), 25 to a BatchWriteItem request."""
        await self._batch_write([{"PutRequest": {"Item": codec.encode_item(i)}} for i in items])

    async def batch_delete(self, keys: Sequence[dict[str, str]]) -> None:
        await self._batch_write([{"DeleteRequest": {"Key": codec.encode_item(k)}} for k in keys])

    async def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem, resending what DynamoDB left unprocessed; `DynamoUnavailable` if it keeps
        leaving items unwritten."""
        for i in range(0, len(requests), BATCH_WRITE_MAX):
            pending: dict[str, Any] = {self.table: requests[i : i + BATCH_WRITE_MAX]}
            for _ in range(10):
                response = await self.transport.call("BatchWriteItem", {"RequestItems": pending})
                pending = response.get("UnprocessedItems") or {}
                if not pending:
                    break
            else:
                raise DynamoUnavailable(
                    RuntimeError("BatchWriteItem left items unprocessed 10 times"),
                    "DynamoDB is throttling this table's writes; retry later or raise its capacity",
                )

    # --- table administration ------------------------------------------------------------------

    async def describe_table(self) -> dict[str, Any]:
        response = await self.transport.call("DescribeTable", {"TableName": self.table})
        table: dict[str, Any] = response["Table"]
        return table


def _conditions(
    request: dict[str, Any],
    condition: str | None,
    names: dict[str, str] | None,
    values: dict[str, Any] | None,
) -> None:
    if condition:
        request["ConditionExpression"] = condition
    if names:
        request["ExpressionAttributeNames"] = names
    if values:
        request["ExpressionAttributeValues"] = {k: codec.encode(v) for k, v in values.items()}
