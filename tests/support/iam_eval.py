"""Evaluate synthesized IAM statements against the requests a principal sends, as IAM would.

Enough of IAM's rules for the construct's policies: Allow/Deny statements, action names with
wildcards, resources either as template values (tokens compare equal when identical) or, once
`resolve_statements` has put a deployment's names into them, as ARNs matched with IAM's
wildcards; and the `ForAllValues:StringLike` / `ForAllValues:StringEquals` conditions on
`dynamodb:LeadingKeys`, with `${aws:PrincipalTag/...}` policy variables. Any other condition fails
the evaluation loudly, so a new kind of condition cannot pass unexamined.

`aws_requests` turns one AWS API call as sent on the wire (service, operation, parameters) into
what IAM authorizes: (action, resource ARN, partition key) per item or resource touched. It knows
every call the library and its Lambdas make (DynamoDB and its stream, EventBridge, S3, SQS,
Lambda); an unknown call fails loudly too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
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


@lru_cache(maxsize=4096)
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


def _resource_matches(pattern: Any, resource: Any) -> bool:
    if isinstance(pattern, str) and isinstance(resource, str):
        return _glob(pattern).fullmatch(resource) is not None
    return bool(pattern == resource)


def names_action(statement: Mapping[str, Any], action: str) -> bool:
    """Whether the statement's `Action` covers `action` (IAM's wildcards)."""
    return any(_glob(pattern).fullmatch(action) for pattern in _listed(statement["Action"]))


def _matches(statement: Mapping[str, Any], request: Request) -> bool:
    if not names_action(statement, request.action):
        return False
    if not any(_resource_matches(r, request.resource) for r in _listed(statement["Resource"])):
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


# --- a deployment's names in the template -----------------------------------------------------


def resolve(value: Any, arns: Mapping[tuple[str, str], str]) -> Any:
    """A template value with `Fn::GetAtt` (looked up in `arns` by (logical id, attribute)),
    `Ref` (by (name, "Ref"): pseudo parameters such as `AWS::Partition`) and `Fn::Join` resolved
    to a string; values it cannot resolve are returned unchanged."""
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        logical_id, attribute = value["Fn::GetAtt"]
        return arns.get((logical_id, attribute), value)
    if isinstance(value, dict) and set(value) == {"Ref"}:
        return arns.get((value["Ref"], "Ref"), value)
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        resolved = [resolve(part, arns) for part in parts]
        if all(isinstance(part, str) for part in resolved):
            return str(separator).join(resolved)
        return value
    if isinstance(value, list):
        return [resolve(v, arns) for v in value]
    return value


def resolve_statements(
    statements: Iterable[Mapping[str, Any]], arns: Mapping[tuple[str, str], str]
) -> list[dict[str, Any]]:
    """The statements with their resources named as in one deployment (see `resolve`)."""
    return [{**s, "Resource": resolve(s["Resource"], arns)} for s in statements]


# --- requests as IAM sees them ----------------------------------------------------------------

#: The IAM action of each kind of item in a TransactWriteItems request.
TRANSACT_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
#: Operations on a table as a whole (no item, so no `dynamodb:LeadingKeys`).
TABLE_OPERATIONS = frozenset(
    {
        "CreateTable",
        "DeleteTable",
        "DescribeTable",
        "DescribeTimeToLive",
        "UpdateTimeToLive",
        "DescribeContinuousBackups",
        "UpdateTable",
    }
)

Touch = tuple[str, Any, str | None]  # (action, resource, partition key)


def _pk(item: Mapping[str, Any], name: str = "PK") -> str:
    value: str = item[name]["S"]
    return value


def _queried_key(payload: Mapping[str, Any]) -> str:
    """The partition key value a Query names: `#name = :value` on the (index's) PK attribute."""
    names = payload.get("ExpressionAttributeNames") or {}
    values = payload["ExpressionAttributeValues"]
    index = payload.get("IndexName")
    key_attribute = f"{index}PK" if index else "PK"
    for name, placeholder in re.findall(r"(#?\w+)\s*=\s*(:\w+)", payload["KeyConditionExpression"]):
        if names.get(name, name) == key_attribute:
            value: str = values[placeholder]["S"]
            return value
    raise AssertionError(f"no partition key condition in {payload['KeyConditionExpression']!r}")


def item_requests(
    operation: str, payload: Mapping[str, Any], table: Any, index: Callable[[str], Any]
) -> list[Touch]:
    """What IAM authorizes for one DynamoDB request as sent on the wire: (action, resource,
    partition key) per item touched. `table` is the table's resource (template value or ARN),
    `index(name)` an index's."""
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
    if operation == "BatchWriteItem":
        written = [
            entry["PutRequest"]["Item"] if "PutRequest" in entry else entry["DeleteRequest"]["Key"]
            for entries in payload["RequestItems"].values()
            for entry in entries
        ]
        return [(action, table, _pk(item)) for item in written]
    if operation == "Query":
        name = payload.get("IndexName")
        resource = table if name is None else index(name)
        return [(action, resource, _queried_key(payload))]
    if operation == "Scan":
        name = payload.get("IndexName")
        return [(action, table if name is None else index(name), None)]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found: list[Touch] = []
        for entry in payload["TransactItems"]:
            ((kind, body),) = entry.items()
            item = body["Item"] if kind == "Put" else body["Key"]
            found.append((TRANSACT_ACTIONS.get(kind, "dynamodb:GetItem"), table, _pk(item)))
        return found
    if operation in TABLE_OPERATIONS:
        return [(action, table, None)]
    if operation == "ListTables":
        return [(action, "*", None)]
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


@dataclass(frozen=True)
class Deployment:
    """The ARNs of one deployment's resources. Requests name whatever table, stream, bus, bucket,
    queue and function a test made; `aws_requests` maps each to this deployment's one, keeping
    what the ARN says below it (index, object key).

    With `replica_regions` it is a multi-Region deployment (docs/multi-region.md): the table has
    a replica in each of those Regions besides `region` (the deploying one, where the stream, the
    aggregator and everything else live), and a table request names the replica of the Region
    its client talks to (`in_region`)."""

    region: str = "us-east-1"
    account: str = "123456789012"
    table: str = "zl-iam"
    bus: str = "zl-iam-alerts"
    bucket: str = "zl-iam-archive"
    queue: str = "zl-iam-dlq"
    function: str = "zl-iam-aggregator"
    replica_regions: tuple[str, ...] = ()

    @property
    def regions(self) -> tuple[str, ...]:
        """Every Region the table is in, the deploying one first."""
        return (self.region, *self.replica_regions)

    def in_region(self, region: str | None) -> Deployment:
        """This deployment as a client in `region` sees it: its table is that Region's replica.
        A single-Region deployment (or a client without a Region) sees the one table wherever
        its client says it is; a multi-Region one has no table in a Region outside `regions`."""
        if not self.replica_regions or region is None or region == self.region:
            return self
        if region not in self.replica_regions:
            raise AssertionError(f"the deployment has no replica in {region} ({self.regions})")
        return replace(self, region=region, replica_regions=())

    def _arn(self, service: str, rest: str) -> str:
        return f"arn:aws:{service}:{self.region}:{self.account}:{rest}"

    @property
    def table_arn(self) -> str:
        return self._arn("dynamodb", f"table/{self.table}")

    @property
    def stream_arn(self) -> str:
        return f"{self.table_arn}/stream/2026-01-01T00:00:00.000"

    @property
    def bus_arn(self) -> str:
        return self._arn("events", f"event-bus/{self.bus}")

    @property
    def bucket_arn(self) -> str:
        return f"arn:aws:s3:::{self.bucket}"

    @property
    def queue_arn(self) -> str:
        return self._arn("sqs", self.queue)

    @property
    def function_arn(self) -> str:
        return self._arn("lambda", f"function:{self.function}")

    def arns(self, template: Mapping[str, Any]) -> dict[tuple[str, str], str]:
        """(logical id, attribute) -> ARN for this deployment's resources in `template`."""
        by_type = {
            ("AWS::DynamoDB::Table", "Arn"): self.table_arn,
            ("AWS::DynamoDB::Table", "StreamArn"): self.stream_arn,
            ("AWS::DynamoDB::GlobalTable", "Arn"): self.table_arn,  # the deploying Region's
            ("AWS::DynamoDB::GlobalTable", "StreamArn"): self.stream_arn,
            ("AWS::Events::EventBus", "Arn"): self.bus_arn,
            ("AWS::S3::Bucket", "Arn"): self.bucket_arn,
            ("AWS::SQS::Queue", "Arn"): self.queue_arn,
            ("AWS::Lambda::Function", "Arn"): self.function_arn,
        }
        found: dict[tuple[str, str], str] = {
            ("AWS::Partition", "Ref"): "aws",
            ("AWS::AccountId", "Ref"): self.account,
            ("AWS::Region", "Ref"): self.region,
            ("AWS::URLSuffix", "Ref"): "amazonaws.com",
        }
        for logical_id, resource in template["Resources"].items():
            for (kind, attribute), arn in by_type.items():
                if resource["Type"] == kind:
                    found[(logical_id, attribute)] = arn
        return found


#: Calls that need no permission (anyone may ask who they are).
UNAUTHORIZED_CALLS = frozenset({("sts", "GetCallerIdentity")})
#: SQS calls by the IAM action they need (batch calls need their single-message action).
SQS_ACTIONS = {
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "SendMessageBatch": "sqs:SendMessage",
}


def aws_requests(
    service: str, operation: str, params: Mapping[str, Any], deployment: Deployment
) -> list[Touch]:
    """What IAM authorizes for one AWS API call (botocore's service and operation names, the
    request parameters), on `deployment`'s resources."""
    if (service, operation) in UNAUTHORIZED_CALLS:
        return []
    if service == "dynamodb":
        table = deployment.table_arn
        return item_requests(operation, params, table, lambda name: f"{table}/index/{name}")
    if service == "dynamodbstreams":
        resource = "*" if operation == "ListStreams" else deployment.stream_arn
        return [(f"dynamodb:{operation}", resource, None)]
    if service == "events" and operation == "PutEvents":
        return [("events:PutEvents", deployment.bus_arn, None) for _ in params["Entries"]]
    if service == "s3" and operation in ("PutObject", "GetObject", "DeleteObject"):
        return [(f"s3:{operation}", f"{deployment.bucket_arn}/{params['Key']}", None)]
    if service == "s3" and operation in ("ListObjects", "ListObjectsV2"):
        return [("s3:ListBucket", deployment.bucket_arn, None)]
    if service == "sqs":
        action = SQS_ACTIONS.get(operation, f"sqs:{operation}")
        return [(action, deployment.queue_arn, None)]
    if service == "lambda" and operation in (
        "GetFunction",
        "GetFunctionConfiguration",
        "UpdateFunctionCode",
    ):
        return [(f"lambda:{operation}", deployment.function_arn, None)]
    raise AssertionError(f"aws_requests does not know {service} {operation}")
