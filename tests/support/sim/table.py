"""The simulated table: DynamoDB's requests in their JSON shape, answered by an in-process model.

`SimTable.answer(operation, request)` applies one request atomically (the simulation has one
thread: requests reach the model one at a time, at the virtual instant the network delivers
them) and returns the response body, or raises `Refused` with DynamoDB's error code and the
extras its error bodies carry (`Item` for ``ALL_OLD`` on a failed condition,
`CancellationReasons` for a cancelled transaction). What it models is what DynamoDB Local does
for the requests the library sends: conditional writes, ``ALL_NEW``/``ALL_OLD`` images,
transactions (all or none, ``ClientRequestToken`` idempotent for 10 minutes), batches, queries
on the table and its key-only indexes, and a stream of the item-level changes (INSERT, MODIFY,
REMOVE with new and old images; none for a write that changed nothing). TTL deletes nothing (as
on DynamoDB Local). Capacity is not reported. A request shape it does not know raises
`Unsupported`: the simulation fails loudly instead of answering something DynamoDB would not.

tests/sim/test_sim_differential.py replays the requests of a simulated run against DynamoDB
Local and compares every answer and the final items with this model's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support.sim import expressions as ex
from zae_limiter import schema

Wire = dict[str, Any]
Item = dict[str, Wire]
TOKEN_LIFETIME_MS = 10 * 60_000
TRANSACT_MAX = 100


class Refused(Exception):
    """DynamoDB's error answer: HTTP `status`, the `code` after '#', extras of the body."""

    def __init__(self, code: str, message: str = "", status: int = 400, **extra: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.extra = extra


class Unsupported(Exception):
    """A request the model does not implement (a simulation bug, never an answer)."""


def copy_wire(value: Wire) -> Wire:
    """A copy of a wire value deep enough to change it (scalars are never changed in place)."""
    if "M" in value:
        return {"M": {k: copy_wire(v) for k, v in value["M"].items()}}
    if "L" in value:
        return {"L": [copy_wire(v) for v in value["L"]]}
    return value


def copy_item(item: Item) -> Item:
    return {k: copy_wire(v) for k, v in item.items()}


@dataclass
class Change:
    """One stream record: an item-level change (keys, images in wire form)."""

    sequence: int
    event: str  # INSERT, MODIFY, REMOVE
    keys: Item
    new: Item | None
    old: Item | None
    at_ms: int
    _record: tuple[str, dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    def record(self, table: str) -> dict[str, Any]:
        """As Lambda receives it from DynamoDB Streams (made once: the consumers and the checks
        read it; nobody changes it)."""
        if self._record is not None and self._record[0] == table:
            return self._record[1]
        body: dict[str, Any] = {
            "Keys": self.keys,
            "SequenceNumber": str(self.sequence).zfill(21),
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
            "ApproximateCreationDateTime": self.at_ms / 1000,
        }
        if self.new is not None:
            body["NewImage"] = self.new
        if self.old is not None:
            body["OldImage"] = self.old
        record = {
            "eventID": f"sim-{self.sequence}",
            "eventName": self.event,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": body,
            "eventSourceARN": f"arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/sim",
        }
        self._record = (table, record)
        return record


@dataclass
class _Table:
    name: str
    description: dict[str, Any]
    indexes: dict[str, tuple[str, ...]]  # name -> (partition key, sort key)
    partitions: dict[str, dict[str, Item]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)

    def get(self, key: Item) -> Item | None:
        pk, sk = _key_of(key)
        return self.partitions.get(pk, {}).get(sk)

    def put(self, key: Item, item: Item | None) -> None:
        pk, sk = _key_of(key)
        if item is None:
            partition = self.partitions.get(pk)
            if partition is not None:
                partition.pop(sk, None)
                if not partition:
                    del self.partitions[pk]
        else:
            self.partitions.setdefault(pk, {})[sk] = item

    def items(self) -> list[Item]:
        return [item for pk in sorted(self.partitions) for _, item in
                sorted(self.partitions[pk].items())]  # fmt: skip


def _key_of(item: Item) -> tuple[str, str]:
    try:
        return item[schema.PARTITION_KEY]["S"], item[schema.SORT_KEY]["S"]
    except KeyError:
        raise Refused(
            "ValidationException", "The provided key element does not match the schema"
        ) from None


_ALLOWED = {
    "GetItem": {"TableName", "Key", "ConsistentRead", "ReturnConsumedCapacity",
                "ProjectionExpression", "ExpressionAttributeNames"},
    "PutItem": {"TableName", "Item", "ConditionExpression", "ExpressionAttributeNames",
                "ExpressionAttributeValues", "ReturnValues", "ReturnConsumedCapacity",
                "ReturnValuesOnConditionCheckFailure"},
    "UpdateItem": {"TableName", "Key", "UpdateExpression", "ConditionExpression",
                   "ExpressionAttributeNames", "ExpressionAttributeValues", "ReturnValues",
                   "ReturnConsumedCapacity", "ReturnValuesOnConditionCheckFailure"},
    "DeleteItem": {"TableName", "Key", "ConditionExpression", "ExpressionAttributeNames",
                   "ExpressionAttributeValues", "ReturnValues", "ReturnConsumedCapacity",
                   "ReturnValuesOnConditionCheckFailure"},
}  # fmt: skip


class SimTable:
    """Every table of one simulated DynamoDB endpoint (see the module docstring).

    `clock` gives the model's own time in epoch milliseconds (the stream's timestamps, the
    transaction tokens' lifetime): the simulation's true time, not any process's skewed clock.
    """

    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.tables: dict[str, _Table] = {}
        self.sequence = 0
        #: ClientRequestToken -> (the request's TransactItems, when first seen)
        self.tokens: dict[str, tuple[list[Any], int]] = {}
        self.applied = 0  # writes that changed or kept an item (answered success)
        #: every request answered, in order, with its answer (the differential test sets it)
        self.recording: list[tuple[str, dict[str, Any], dict[str, Any] | Refused]] | None = None
        self.handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "CreateTable": self._create_table,
            "DescribeTable": self._describe_table,
            "DeleteTable": self._delete_table,
            "UpdateTimeToLive": self._update_ttl,
            "GetItem": self._get_item,
            "PutItem": self._put_item,
            "UpdateItem": self._update_item,
            "DeleteItem": self._delete_item,
            "BatchGetItem": self._batch_get,
            "BatchWriteItem": self._batch_write,
            "Query": self._query,
            "Scan": self._scan,
            "TransactWriteItems": self._transact_write,
        }

    def answer(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.recording is None:
            return self._answer(operation, request)
        sent = json.loads(json.dumps(request))
        try:
            result = self._answer(operation, request)
        except Refused as refused:
            self.recording.append((operation, sent, refused))
            raise
        self.recording.append((operation, sent, json.loads(json.dumps(result))))
        return result

    def _answer(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        handler = self.handlers.get(operation)
        if handler is None:
            raise Unsupported(f"the simulated table does not implement {operation}")
        allowed = _ALLOWED.get(operation)
        if allowed is not None and not set(request) <= allowed:
            raise Unsupported(f"{operation} with {sorted(set(request) - allowed)}")
        try:
            return handler(request)
        except ex.Invalid as exc:
            raise Refused("ValidationException", str(exc)) from None

    def table(self, name: str) -> _Table:
        found = self.tables.get(name)
        if found is None:
            raise Refused("ResourceNotFoundException", "Requested resource not found")
        return found

    # --- tables ----------------------------------------------------------------------------

    def _create_table(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request["TableName"]
        if name in self.tables:
            raise Refused("ResourceInUseException", f"Table already exists: {name}")
        indexes = {
            index["IndexName"]: tuple(k["AttributeName"] for k in index["KeySchema"])
            for index in request.get("GlobalSecondaryIndexes", [])
        }
        description = {
            **{k: v for k, v in request.items() if k != "Tags"},
            "TableStatus": "ACTIVE",
            "ItemCount": 0,
            "TableArn": f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}",
        }
        self.tables[name] = _Table(name, description, indexes)
        return {"TableDescription": description}

    def _describe_table(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"Table": self.table(request["TableName"]).description}

    def _delete_table(self, request: dict[str, Any]) -> dict[str, Any]:
        table = self.table(request["TableName"])
        del self.tables[table.name]
        return {"TableDescription": table.description}

    def _update_ttl(self, request: dict[str, Any]) -> dict[str, Any]:
        self.table(request["TableName"])
        return {"TimeToLiveSpecification": request["TimeToLiveSpecification"]}

    # --- single items --------------------------------------------------------------------------

    def _get_item(self, request: dict[str, Any]) -> dict[str, Any]:
        if "ProjectionExpression" in request:
            raise Unsupported("GetItem with a projection")
        item = self.table(request["TableName"]).get(request["Key"])
        return {} if item is None else {"Item": item}

    def _check(self, request: dict[str, Any], old: Item | None) -> None:
        text = request.get("ConditionExpression")
        if text is None:
            return
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        if not ex.condition(text, names)(old or {}, values):
            extra: dict[str, Any] = {}
            if old is not None and request.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
                extra["Item"] = old
            raise Refused(
                "ConditionalCheckFailedException", "The conditional request failed", **extra
            )

    def _put_item(self, request: dict[str, Any]) -> dict[str, Any]:
        table = self.table(request["TableName"])
        item = request["Item"]
        old = table.get(item)
        self._check(request, old)
        self._write(table, item, copy_item(item), old)
        return _returned(request, old, None)

    def _update_item(self, request: dict[str, Any]) -> dict[str, Any]:
        table = self.table(request["TableName"])
        key = request["Key"]
        old = table.get(key)
        self._check(request, old)
        new = self._updated(request, key, old)
        self._write(table, key, new, old)
        return _returned(request, old, new)

    def _updated(self, request: dict[str, Any], key: Item, old: Item | None) -> Item:
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        base = old if old is not None else {k: key[k] for k in (schema.PARTITION_KEY,
                                                                schema.SORT_KEY)}  # fmt: skip
        new = dict(base)  # the actions copy each map or list they change (expressions._parent)
        ex.update(request.get("UpdateExpression", ""), names)(base, new, values)
        if _key_of(new) != _key_of(base):
            raise Refused("ValidationException", "Cannot update attribute PK or SK")
        return new

    def _delete_item(self, request: dict[str, Any]) -> dict[str, Any]:
        table = self.table(request["TableName"])
        old = table.get(request["Key"])
        self._check(request, old)
        self._write(table, request["Key"], None, old)
        return _returned(request, old, None)

    def _write(self, table: _Table, key: Item, new: Item | None, old: Item | None) -> None:
        self.applied += 1
        table.put(key, new)
        if new == old:
            return  # DynamoDB Streams writes no record for a write that changed nothing
        self.sequence += 1
        event = "INSERT" if old is None else "REMOVE" if new is None else "MODIFY"
        keys = {k: (new or old or {})[k] for k in (schema.PARTITION_KEY, schema.SORT_KEY)}
        table.changes.append(Change(self.sequence, event, keys, new, old, self.clock()))

    # --- many items ----------------------------------------------------------------------------

    def _batch_get(self, request: dict[str, Any]) -> dict[str, Any]:
        responses: dict[str, list[Item]] = {}
        for name, ask in request["RequestItems"].items():
            if set(ask) - {"Keys", "ConsistentRead"}:
                raise Unsupported(f"BatchGetItem with {sorted(ask)}")
            table = self.table(name)
            found = [table.get(key) for key in ask["Keys"]]
            responses[name] = [item for item in found if item is not None]
        return {"Responses": responses, "UnprocessedKeys": {}}

    def _batch_write(self, request: dict[str, Any]) -> dict[str, Any]:
        for name, writes in request["RequestItems"].items():
            table = self.table(name)
            for write in writes:
                if "PutRequest" in write:
                    item = write["PutRequest"]["Item"]
                    self._write(table, item, copy_item(item), table.get(item))
                else:
                    key = write["DeleteRequest"]["Key"]
                    self._write(table, key, None, table.get(key))
        return {"UnprocessedItems": {}}

    def _query(self, request: dict[str, Any]) -> dict[str, Any]:
        known = {"TableName", "KeyConditionExpression", "ExpressionAttributeNames",
                 "ExpressionAttributeValues", "ScanIndexForward", "IndexName", "ConsistentRead",
                 "Limit", "ExclusiveStartKey", "ReturnConsumedCapacity"}  # fmt: skip
        if not set(request) <= known:
            raise Unsupported(f"Query with {sorted(set(request) - known)}")
        table = self.table(request["TableName"])
        names = request.get("ExpressionAttributeNames", {})
        values = request.get("ExpressionAttributeValues", {})
        matches = ex.condition(request["KeyConditionExpression"], names)
        index = request.get("IndexName")
        if index is None:
            pk_name, sk_name = schema.PARTITION_KEY, schema.SORT_KEY
            candidates = [item for _, item in sorted(self._partition(table, request).items())]
        else:
            if request.get("ConsistentRead"):
                raise Refused("ValidationException", "Consistent reads are not supported on GSIs")
            pk_name, sk_name = table.indexes[index]
            candidates = [i for i in table.items() if pk_name in i and sk_name in i]
            candidates.sort(key=lambda i: (i[sk_name]["S"], _key_of(i)))
        found = [item for item in candidates if matches(item, values)]
        if request.get("ScanIndexForward") is False:
            found.reverse()
        if index is not None:
            kept = (schema.PARTITION_KEY, schema.SORT_KEY, pk_name, sk_name)
            found = [{k: item[k] for k in kept if k in item} for item in found]
        return _page(found, request, (schema.PARTITION_KEY, schema.SORT_KEY, pk_name, sk_name))

    def _partition(self, table: _Table, request: dict[str, Any]) -> dict[str, Item]:
        """The partition a base-table query names (its key condition's `pk = :value`)."""
        names = request.get("ExpressionAttributeNames", {})
        for token, value in request.get("ExpressionAttributeValues", {}).items():
            probe = {schema.PARTITION_KEY: value}
            text = request["KeyConditionExpression"].split(" AND ")[0]
            if token in text and ex.condition(text, names)(probe, request[
                    "ExpressionAttributeValues"]):  # fmt: skip
                return table.partitions.get(value["S"], {})
        raise Unsupported("a Query without an equality on the partition key")

    def _scan(self, request: dict[str, Any]) -> dict[str, Any]:
        if set(request) - {"TableName", "Limit", "ExclusiveStartKey", "ReturnConsumedCapacity"}:
            raise Unsupported(f"Scan with {sorted(request)}")
        table = self.table(request["TableName"])
        return _page(table.items(), request, (schema.PARTITION_KEY, schema.SORT_KEY))

    # --- transactions ------------------------------------------------------------------------

    def _transact_write(self, request: dict[str, Any]) -> dict[str, Any]:
        operations = request["TransactItems"]
        if not 0 < len(operations) <= TRANSACT_MAX:
            raise Refused("ValidationException", "TransactItems must have 1 to 100 items")
        token = request.get("ClientRequestToken")
        now = self.clock()
        if token is not None:
            seen = self._token(token, now)
            if seen is not None:
                if seen[0] != operations:  # the same parameters (dicts compare unordered)
                    raise Refused("IdempotentParameterMismatchException", "token reused")
                return {}
        plans: list[tuple[_Table, Item, Item | None, Item | None, str]] = []
        reasons: list[dict[str, Any]] = []
        failed = False
        keys_seen: set[tuple[str, str, str]] = set()
        for operation in operations:
            ((kind, body),) = operation.items()
            table = self.table(body["TableName"])
            key = body["Item"] if kind == "Put" else body["Key"]
            identity = (table.name, *_key_of(key))
            if identity in keys_seen:
                raise Refused(
                    "ValidationException",
                    "Transaction request cannot include multiple operations on one item",
                )
            keys_seen.add(identity)
            old = table.get(key)
            try:
                self._check(body, old)
            except Refused as refused:
                failed = True
                reason: dict[str, Any] = {"Code": "ConditionalCheckFailed",
                                          "Message": "The conditional request failed"}  # fmt: skip
                if "Item" in refused.extra:
                    reason["Item"] = refused.extra["Item"]
                reasons.append(reason)
                continue
            reasons.append({"Code": "None"})
            if kind == "Put":
                plans.append((table, key, copy_item(body["Item"]), old, kind))
            elif kind == "Update":
                plans.append((table, key, self._updated(body, key, old), old, kind))
            elif kind == "Delete":
                plans.append((table, key, None, old, kind))
        if failed:
            raise Refused(
                "TransactionCanceledException",
                "Transaction cancelled, please refer cancellation reasons for specific reasons "
                f"[{', '.join(r['Code'] for r in reasons)}]",
                CancellationReasons=reasons,
            )
        for table, key, new, old, _ in plans:
            self._write(table, key, new, old)
        if token is not None:
            self.tokens[token] = (operations, now)
        return {}

    def _token(self, token: str, now: int) -> tuple[list[Any], int] | None:
        """What a client request token was first sent with, in the last 10 minutes."""
        seen = self.tokens.get(token)
        if seen is not None and now - seen[1] > TOKEN_LIFETIME_MS:
            del self.tokens[token]
            return None
        return seen

    # --- reading the outcome ---------------------------------------------------------------------

    def changes(self, table: str) -> list[Change]:
        return self.table(table).changes

    def digest(self) -> str:
        """A hash of every item of every table (for the history's hash)."""
        h = hashlib.blake2b(digest_size=16)
        for name in sorted(self.tables):
            for item in self.tables[name].items():
                h.update(json.dumps(item, sort_keys=True).encode())
        return h.hexdigest()


def _returned(request: dict[str, Any], old: Item | None, new: Item | None) -> dict[str, Any]:
    wanted = request.get("ReturnValues", "NONE")
    if wanted == "NONE":
        return {}
    if wanted == "ALL_NEW":
        return {"Attributes": new} if new is not None else {}
    if wanted == "ALL_OLD":
        return {"Attributes": old} if old is not None else {}
    raise Unsupported(f"ReturnValues {wanted}")


def _page(found: list[Item], request: dict[str, Any], key_names: tuple[str, ...]) -> dict[str, Any]:
    start = request.get("ExclusiveStartKey")
    if start is not None:
        marker = {k: start[k]["S"] for k in start}
        for position, item in enumerate(found):
            if all(item.get(k, {}).get("S") == v for k, v in marker.items()):
                found = found[position + 1 :]
                break
    limit = request.get("Limit")
    out: dict[str, Any] = {}
    if limit is not None and len(found) > limit:
        found = found[:limit]
        last = found[-1]
        out["LastEvaluatedKey"] = {k: last[k] for k in key_names if k in last}
    out["Items"] = found
    out["Count"] = len(found)
    out["ScannedCount"] = len(found)
    return out
