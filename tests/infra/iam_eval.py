"""Evaluate synthesized IAM statements against one DynamoDB item request, as IAM would.

Enough of IAM's rules for the construct's policies: Allow/Deny statements, action names with
wildcards, resources compared as template values (tokens compare equal when identical), and the
`ForAllValues:StringLike` / `ForAllValues:StringEquals` conditions on `dynamodb:LeadingKeys`, with
`${aws:PrincipalTag/...}` policy variables. Any other condition fails the evaluation loudly, so a
new kind of condition cannot pass unexamined.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LEADING_KEYS = "dynamodb:LeadingKeys"
TAG_VARIABLE = re.compile(r"\$\{aws:PrincipalTag/([^}]+)\}")


@dataclass(frozen=True)
class Request:
    """One action on one item (its partition key) of a resource, by a principal with `tags`."""

    action: str
    resource: Any
    partition_key: str | None
    tags: Mapping[str, str] = field(default_factory=dict)


def _glob(pattern: str) -> re.Pattern[str]:
    """IAM's StringLike: `*` any run of characters, `?` exactly one; nothing else is special."""
    parts = ("." if c == "?" else ".*" if c == "*" else re.escape(c) for c in pattern)
    return re.compile("".join(parts), re.DOTALL)


def _substitute(value: str, tags: Mapping[str, str]) -> str | None:
    """The value with policy variables resolved; None if one cannot be (the value never matches)."""
    missing = [name for name in TAG_VARIABLE.findall(value) if name not in tags]
    if missing:
        return None
    return TAG_VARIABLE.sub(lambda m: tags[m.group(1)], value)


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _condition_holds(operator: str, block: Mapping[str, Any], request: Request) -> bool:
    if set(block) != {LEADING_KEYS} or operator not in (
        "ForAllValues:StringLike",
        "ForAllValues:StringEquals",
    ):
        raise AssertionError(f"the evaluator does not know condition {operator} {block}")
    keys = [] if request.partition_key is None else [request.partition_key]
    patterns = [_substitute(str(v), request.tags) for v in _listed(block[LEADING_KEYS])]
    usable = [p for p in patterns if p is not None]
    if operator.endswith("StringEquals"):
        return all(key in usable for key in keys)
    return all(any(_glob(p).fullmatch(key) for p in usable) for key in keys)


def _matches(statement: Mapping[str, Any], request: Request) -> bool:
    actions = _listed(statement["Action"])
    if not any(_glob(action).fullmatch(request.action) for action in actions):
        return False
    if request.resource not in _listed(statement["Resource"]):
        return False
    conditions: Mapping[str, Mapping[str, Any]] = statement.get("Condition", {})
    return all(_condition_holds(op, block, request) for op, block in conditions.items())


def allows(statements: Iterable[Mapping[str, Any]], request: Request) -> bool:
    """True if some Allow statement matches the request and no Deny statement does."""
    found = list(statements)
    if any(s["Effect"] == "Deny" and _matches(s, request) for s in found):
        return False
    return any(s["Effect"] == "Allow" and _matches(s, request) for s in found)


def allowed_kinds(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: Any,
    items: Mapping[str, str],
    tags: Mapping[str, str] | None = None,
) -> set[str]:
    """Which of `items` (kind -> partition key) the statements let `action` touch."""
    return {
        kind
        for kind, partition_key in items.items()
        if allows(statements, Request(action, resource, partition_key, tags or {}))
    }


#: The IAM action of each kind of item in a TransactWriteItems request.
TRANSACT_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}


def _pk(item: Mapping[str, Any], name: str = "PK") -> str:
    value: str = item[name]["S"]
    return value


def item_requests(
    operation: str, payload: Mapping[str, Any], table: Any, index: Callable[[str], Any]
) -> list[tuple[str, Any, str | None]]:
    """What IAM authorizes for one DynamoDB request as sent on the wire: (action, resource,
    partition key) per item touched. `index(name)` is the template value of an index's ARN."""
    action = f"dynamodb:{operation}"
    if operation in ("GetItem", "UpdateItem", "DeleteItem"):
        return [(action, table, _pk(payload["Key"]))]
    if operation == "PutItem":
        return [(action, table, _pk(payload["Item"]))]
    if operation == "BatchGetItem":
        return [
            (action, table, _pk(key))
            for request in payload["RequestItems"].values()
            for key in request["Keys"]
        ]
    if operation == "Query":
        name = payload.get("IndexName")
        resource = table if name is None else index(name)
        return [(action, resource, payload["ExpressionAttributeValues"][":pk"]["S"])]
    if operation == "TransactWriteItems":
        found: list[tuple[str, Any, str | None]] = []
        for entry in payload["TransactItems"]:
            ((kind, body),) = entry.items()
            item = body["Item"] if kind == "Put" else body["Key"]
            found.append((TRANSACT_ACTIONS[kind], table, _pk(item)))
        return found
    if operation == "DescribeTable":
        return [(action, table, None)]
    raise AssertionError(f"item_requests does not know {operation}")


def denied_requests(
    statements: Sequence[Mapping[str, Any]],
    calls: Iterable[tuple[str, Mapping[str, Any]]],
    table: Any,
    index: Callable[[str], Any],
    tags: Mapping[str, str] | None = None,
) -> list[tuple[str, str | None]]:
    """The (action, partition key) of every item request in `calls` the statements refuse."""
    return [
        (action, key)
        for operation, payload in calls
        for action, resource, key in item_requests(operation, payload, table, index)
        if not allows(statements, Request(action, resource, key, tags or {}))
    ]
