"""A multi-item change without a transaction: one conditional write at a time, rolled forward.

A table with multi-Region strong consistency refuses every transaction (docs/multi-region.md).
There, `Store.transact` sends a transaction's operations here instead, with the same meaning:
all of them or none, exactly once, and the same `TransactionCancelled` when it is refused.

* **One decision.** The operations are sent in this order: condition checks first (each a
  conditional write that changes nothing), then the *decision* (the first other operation with a
  condition), then the rest. Up to and including the decision, a failed condition cancels the
  change with nothing written: `TransactionCancelled`, its reasons in the caller's order, as a
  transaction would report them. After the decision nothing may refuse (the callers' operations
  are unconditional there, or only guard against applying twice).
* **Exactly once.** Every update and conditional put carries the change's token in the item's
  `zj` and applies only where `zj` is not that token, so a re-send after a lost answer never
  applies twice: a write refused with its own token on the item had landed.
* **Roll forward.** A change of several items first writes a journal entry (the operations, in
  the reserved partition `_#JOURNAL`) and deletes it when done. `resume` (the sweeper,
  `zae_limiter.sweeper`) finishes an entry older than `RESUME_AFTER_MS`, when no copy of its
  writes can still land: if the decision's item carries the token, the rest is written again;
  if not, the change never happened and the entry is dropped.

A condition check may only hold on an item that exists (`attribute_exists(PK)` in it): it is an
`UpdateItem` that removes an attribute no item has, which on an absent item would create one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import TYPE_CHECKING, Any

from ..core.ulids import ulid_ms
from . import codec, keys
from .failures import ConditionFailed, TransactionCancelled, UnknownOutcome

if TYPE_CHECKING:
    from .store import Store

log = logging.getLogger("zae_limiter")

MARKER = "zj"
#: An attribute no item has: a condition check removes it, changing nothing.
NOTHING = "zc"
JOURNAL_PK = f"{keys.RESERVED}#JOURNAL"
#: A journal entry this old is finished by the sweeper: longer than any re-send of its writes
#: can still land (acquire/deadlines.py bounds them to well under two minutes).
RESUME_AFTER_MS = 5 * 60_000
RESENDS = 3  # re-sends of one write whose answer was lost


def new_token(now_ms: int | None = None) -> str:
    """A change's token: its time (ms, 13 digits) then 12 random characters."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    return f"{now:013d}{secrets.token_hex(6)}"


def token_ms(token: str) -> int:
    """When a token was made: `new_token`'s or a ulid (`core.ulids`: the config changes');
    0 when it carries no time."""
    head = token[:13]
    if head.isdigit():
        return int(head)
    return ulid_ms(token) or 0


def _kind(operation: dict[str, Any]) -> str:
    ((kind, _),) = operation.items()
    return kind


def order(operations: list[dict[str, Any]]) -> tuple[list[int], int]:
    """The order the operations are sent in (indexes into `operations`) and the position, in
    that order, of the decision (see the module docstring)."""
    checks = [i for i, op in enumerate(operations) if _kind(op) == "ConditionCheck"]
    rest = [i for i in range(len(operations)) if i not in checks]
    conditional = [i for i in rest if "ConditionExpression" in operations[i][_kind(operations[i])]]
    decision = conditional[0] if conditional else rest[0]
    ordered = [*checks, decision, *(i for i in rest if i != decision)]
    return ordered, len(checks)


async def run(store: Store, operations: list[dict[str, Any]], token: str | None) -> None:
    """Apply `operations` (TransactWriteItems' items, wire form) one at a time (the docstring)."""
    token = token or new_token()
    ordered, decision = order(operations)
    journal = len(operations) - sum(_kind(op) == "ConditionCheck" for op in operations) > 1
    if journal:
        await store.transport.call(
            "PutItem", _journal_put(store.table, operations, token), write=True
        )
    done = False
    try:
        for position, index in enumerate(ordered):
            applied = await _apply(store, operations[index], token)
            if applied or position > decision:
                continue
            reasons: list[dict[str, Any]] = [{"Code": "None"} for _ in operations]
            reasons[index] = {"Code": "ConditionalCheckFailed", **_old_item(applied)}
            done = True  # nothing was written: nothing to finish
            raise TransactionCancelled(reasons)
        done = True
    finally:
        if journal and done:
            await _forget(store, token)


class _Refused:
    """A write refused by its condition (falsy), with the item as it was."""

    def __init__(self, item: dict[str, Any] | None) -> None:
        self.item = item

    def __bool__(self) -> bool:
        return False


def _old_item(refused: Any) -> dict[str, Any]:
    item = getattr(refused, "item", None)
    return {"Item": codec.encode_item(item)} if item else {}


async def _apply(store: Store, operation: dict[str, Any], token: str) -> bool | _Refused:
    """Send one operation (re-sending after a lost answer); True once it is applied, a falsy
    `_Refused` when its own condition refused it."""
    operation_name, request = _request(store.table, operation, token)
    for attempt in range(RESENDS + 1):
        try:
            await store.transport.call(operation_name, request, write=True)
            return True
        except ConditionFailed as failed:
            if attempt and operation_name == "DeleteItem" and failed.item is None:
                return True  # deleted by the send whose answer was lost
            if failed.item is not None and failed.item.get(MARKER) == token:
                return True  # an earlier send of this write landed
            return _Refused(failed.item)
        except UnknownOutcome:
            if attempt == RESENDS:
                raise
            await asyncio.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _request(table: str, operation: dict[str, Any], token: str) -> tuple[str, dict[str, Any]]:
    """One transaction item as its single-item request, with the token's marker."""
    ((kind, body),) = operation.items()
    request = {k: v for k, v in body.items() if k != "ReturnValuesOnConditionCheckFailure"}
    request["TableName"] = table
    request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    names = dict(request.get("ExpressionAttributeNames") or {})
    values = dict(request.get("ExpressionAttributeValues") or {})
    condition = request.get("ConditionExpression")
    if kind == "ConditionCheck":
        assert condition and "attribute_exists(" in condition, condition
        names["#zc"] = NOTHING
        request["UpdateExpression"] = "REMOVE #zc"
        request["ExpressionAttributeNames"] = names
        return "UpdateItem", request
    if kind == "Delete":
        return "DeleteItem", request
    if kind == "Put" and not condition:
        return "PutItem", request  # the same whole item again: applying twice changes nothing
    names["#zj"], values[":zj"] = MARKER, codec.encode(token)
    once = "(attribute_not_exists(#zj) OR #zj <> :zj)"
    request["ConditionExpression"] = f"{conjunct(condition)} AND {once}" if condition else once
    request["ExpressionAttributeNames"] = names
    request["ExpressionAttributeValues"] = values
    if kind == "Put":
        request["Item"] = {**request["Item"], MARKER: codec.encode(token)}
        return "PutItem", request
    request["UpdateExpression"] = _with_marker(str(request["UpdateExpression"]))
    return "UpdateItem", request


def conjunct(condition: str) -> str:
    """`condition` as one term of an AND: in parentheses if it has an OR outside any (DynamoDB
    refuses redundant parentheses)."""
    depth = 0
    for i, char in enumerate(condition):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and condition.startswith(" OR ", i):
            return f"({condition})"
    return condition


def _with_marker(expression: str) -> str:
    """The update expression that also sets the marker (into its SET clause, if it has one)."""
    words = expression.split(" ")
    if "SET" in words:
        at = words.index("SET")
        return " ".join([*words[: at + 1], "#zj = :zj,", *words[at + 1 :]])
    return f"{expression} SET #zj = :zj"


def _journal_put(table: str, operations: list[dict[str, Any]], token: str) -> dict[str, Any]:
    item = {"PK": JOURNAL_PK, "SK": token, "ops": json.dumps(operations, separators=(",", ":"))}
    return {"TableName": table, "Item": codec.encode_item(item)}


async def _forget(store: Store, token: str) -> None:
    key = codec.encode_item(keys.key(JOURNAL_PK, token))
    await store.transport.call("DeleteItem", {"TableName": store.table, "Key": key}, write=True)


async def resume(store: Store, now_ms: int) -> tuple[int, int]:
    """Finish every journal entry older than `RESUME_AFTER_MS` (the module docstring).
    Returns (changes completed, changes found never to have happened)."""
    completed = dropped = 0
    entries = await store.query_all(JOURNAL_PK, consistent=True)
    for entry in entries:
        token = str(entry["SK"])
        if "ops" not in entry or now_ms - token_ms(token) < RESUME_AFTER_MS:
            continue  # another kind (a balance operation's), or it may still be running
        operations: list[dict[str, Any]] = json.loads(entry["ops"])
        ordered, decision = order(operations)
        if await _decided(store, operations[ordered[decision]], token):
            for index in ordered[decision + 1 :]:
                if not await _apply(store, operations[index], token):
                    log.warning("journal %s: operation %d refused when finished", token, index)
            completed += 1
        else:
            dropped += 1
        await _forget(store, token)
    return completed, dropped


async def _decided(store: Store, decision: dict[str, Any], token: str) -> bool:
    """Whether the decision's write landed: its item carries the token (a delete: it is gone)."""
    ((kind, body),) = decision.items()
    key = codec.decode_item(body.get("Key") or _key_of(body.get("Item") or {}))
    assert key is not None
    item = await store.get(key, consistent=True)
    if kind == "Delete":
        return item is None
    if kind == "Put" and "ConditionExpression" not in body:
        return item is not None
    return item is not None and item.get(MARKER) == token


def _key_of(item: dict[str, Any]) -> dict[str, Any]:
    return {name: item[name] for name in ("PK", "SK") if name in item}
