"""The version record writer behind the deploy-time custom resource (see handler.py).

Create/Update: reads the version record (strongly consistent), refuses the deployment if the
aggregator being deployed is older than the recorded `client_min_version` (unless
`AllowAggregatorDowngrade`), then records this deployment's aggregator version and function, the
retention settings and `updated_by=cdk:<version>`. `client_min_version` is kept (never lowered);
an existing `schema_version` is kept too (only `zae-limiter upgrade` migrates data and raises it);
a record written for the first time gets the table's `table_id`, which is never replaced.
Registers the `default` namespace if it is missing. Delete: nothing (the table is retained).

The versions come from the resource's properties (set at synth from the same runtime package
that is bundled), not from the code running: when CloudFormation rolls a failed update back, it
calls this function, still on the new code, with the previous properties, and the record must
then describe the previous deployment again.

Runs on Lambda's python3.12 with this folder, the bundled `zae_limiter` package and boto3 only.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

from zae_limiter import schema, versioning
from zae_limiter.core.times import iso_millis
from zae_limiter.dynamo import codec, keys, records
from zae_limiter.dynamo.multi_region import RECORD_CONSISTENCY, RECORD_REGIONS, STRONG

log = logging.getLogger(__name__)
log.setLevel(logging.INFO)

DEFAULT_NAMESPACE = "default"
#: `client_min_version` of a new record: no minimum yet (feature gates raise it, docs/versions.md).
INITIAL_CLIENT_MIN_VERSION = "0.0.0"
MAX_ATTEMPTS = 5


class DeploymentRefused(Exception):
    """The deployment would break the table's version guarantees."""


@dataclass(frozen=True)
class Request:
    """The custom resource's properties (CloudFormation passes every value as a string)."""

    table_name: str
    aggregator_version: str
    schema_version: str
    aggregator_function: str | None
    aggregator_dlq_url: str | None
    allow_aggregator_downgrade: bool
    audit_retention_days: int
    usage_retention_days: int
    #: A global table with multi-Region strong consistency: its Regions (docs/multi-region.md).
    #: Recorded for roles that may not describe the table; no transaction is sent to it.
    replica_regions: tuple[str, ...] = ()

    @classmethod
    def from_properties(cls, properties: dict[str, Any]) -> Request:
        return cls(
            table_name=str(properties["TableName"]),
            aggregator_version=str(properties["AggregatorVersion"]),
            schema_version=str(properties["SchemaVersion"]),
            aggregator_function=properties.get("AggregatorFunction") or None,
            aggregator_dlq_url=properties.get("DeadLetterQueueUrl") or None,
            allow_aggregator_downgrade=str(properties.get("AllowAggregatorDowngrade")).lower()
            == "true",
            audit_retention_days=int(properties["AuditRetentionDays"]),
            usage_retention_days=int(properties["UsageRetentionDays"]),
            replica_regions=tuple(
                r for r in str(properties.get("ReplicaRegions") or "").split(",") if r
            )
            if properties.get("MultiRegionConsistency") == "STRONG"
            else (),
        )


def _is_condition_failure(error: ClientError) -> bool:
    code = error.response.get("Error", {}).get("Code", "")
    if code == "ConditionalCheckFailedException":
        return True
    reasons = error.response.get("CancellationReasons") or []
    return code == "TransactionCanceledException" and any(
        reason.get("Code") == "ConditionalCheckFailed" for reason in reasons
    )


def _get(client: Any, table_name: str, key: dict[str, str]) -> dict[str, Any] | None:
    response = client.get_item(
        TableName=table_name, Key=codec.encode_item(key), ConsistentRead=True
    )
    return codec.decode_item(response.get("Item"))


def _schema_version_to_keep(recorded: str | None, request: Request) -> str:
    """The schema version to record; refuses a table whose layout this code cannot serve."""
    if recorded is None:
        return request.schema_version
    theirs, ours = versioning.parse(recorded), versioning.parse(request.schema_version)
    if theirs.major != ours.major:
        raise DeploymentRefused(
            f"the table's schema {recorded} is incompatible with this deployment's schema "
            f"{request.schema_version} (different major version)"
        )
    if theirs > ours and not request.allow_aggregator_downgrade:
        raise DeploymentRefused(
            f"the table's schema {recorded} is newer than this deployment's "
            f"{request.schema_version}; deploy a newer zae-limiter, or set "
            "allow_aggregator_downgrade=True to deploy anyway"
        )
    return recorded


def write_version_record(client: Any, request: Request, updated_at: str) -> dict[str, Any]:
    """Read, check and write the version record; returns the item written."""
    key = keys.version_record()
    ours = request.aggregator_version
    for _ in range(MAX_ATTEMPTS):
        current = _get(client, request.table_name, key)
        minimum = str((current or {}).get("client_min_version") or INITIAL_CLIENT_MIN_VERSION)
        if versioning.parse(ours) < versioning.parse(minimum):
            if not request.allow_aggregator_downgrade:
                raise DeploymentRefused(
                    f"refusing to deploy the zae-limiter {ours} aggregator to table "
                    f"{request.table_name!r}: its version record requires {minimum} or later "
                    "(features that older code would misread are in use). Deploy zae-limiter "
                    f">= {minimum}, or set allow_aggregator_downgrade=True to override."
                )
            log.warning("aggregator %s is below client_min_version %s (allowed)", ours, minimum)
        recorded_schema = (current or {}).get("schema_version")
        item = records.version_record_item(
            schema_version=_schema_version_to_keep(
                None if recorded_schema is None else str(recorded_schema), request
            ),
            aggregator_version=ours,
            aggregator_function=request.aggregator_function,
            client_min_version=minimum,
            updated_at=updated_at,
            updated_by=f"cdk:{ours}",
            audit_retention_days=request.audit_retention_days,
            usage_retention_days=request.usage_retention_days,
            aggregator_dlq_url=request.aggregator_dlq_url,
            # the table's identity: drawn when the record is first written, never replaced
            table_id=records.new_table_id() if current is None else None,
        )
        if request.replica_regions:
            item[RECORD_CONSISTENCY] = STRONG
            item[RECORD_REGIONS] = list(request.replica_regions)
        try:
            client.update_item(**_update_request(request.table_name, item, current))
        except ClientError as error:
            if _is_condition_failure(error):
                log.info("version record changed while writing it; reading it again")
                continue
            raise
        log.info("version record written: %s", json.dumps(item))
        return item
    raise RuntimeError("the version record kept changing while it was written; deploy again")


def _update_request(
    table_name: str, item: dict[str, Any], current: dict[str, Any] | None
) -> dict[str, Any]:
    """SET every attribute of `item`; only if the fields we checked have not changed since."""
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    assignments = []
    attributes = [a for a in item if a not in (schema.PARTITION_KEY, schema.SORT_KEY)]
    for i, attribute in enumerate(attributes):
        names[f"#a{i}"] = attribute
        values[f":a{i}"] = codec.encode(item[attribute])
        assignments.append(f"#a{i} = :a{i}")
    names["#pk"] = schema.PARTITION_KEY
    if current is None:
        condition = "attribute_not_exists(#pk)"
    else:
        checks = ["attribute_exists(#pk)"]
        for i, attribute in enumerate(("client_min_version", "schema_version")):
            names[f"#c{i}"] = attribute
            if current.get(attribute) is None:
                checks.append(f"attribute_not_exists(#c{i})")
            else:
                values[f":c{i}"] = codec.encode(current[attribute])
                checks.append(f"#c{i} = :c{i}")
        condition = " AND ".join(checks)
    return {
        "TableName": table_name,
        "Key": codec.encode_item(keys.version_record()),
        "UpdateExpression": "SET " + ", ".join(assignments),
        "ConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
    }


def ensure_namespace(
    client: Any, table_name: str, name: str, created_at: str, *, one_at_a_time: bool = False
) -> str:
    """The id of namespace `name`, registering it (both registry items) if it is missing. On
    a multi-Region table (`one_at_a_time`: no transactions) the name's item decides, then the
    id's item follows."""
    for _ in range(MAX_ATTEMPTS):
        existing = _get(client, table_name, keys.namespace_by_name(name))
        if existing is not None:
            if existing.get("status") != records.NAMESPACE_ACTIVE:
                log.warning("namespace %r exists with status %s", name, existing.get("status"))
            return str(existing["id"])
        namespace_id = records.new_namespace_id()
        if one_at_a_time:
            by_name, by_id = records.namespace_items(name, namespace_id, created_at)
            try:
                _put_new(client, table_name, by_name)
            except ClientError as error:
                if _is_condition_failure(error):
                    continue  # registered meanwhile: read it again
                raise
            client.put_item(TableName=table_name, Item=codec.encode_item(by_id))
            log.info("registered namespace %r as %s", name, namespace_id)
            return namespace_id
        try:
            client.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": table_name,
                            "Item": codec.encode_item(item),
                            "ConditionExpression": "attribute_not_exists(#pk)",
                            "ExpressionAttributeNames": {"#pk": schema.PARTITION_KEY},
                        }
                    }
                    for item in records.namespace_items(name, namespace_id, created_at)
                ]
            )
        except ClientError as error:
            if _is_condition_failure(error):
                continue
            raise
        log.info("registered namespace %r as %s", name, namespace_id)
        return namespace_id
    raise RuntimeError(f"could not register namespace {name!r}; deploy again")


def _put_new(client: Any, table_name: str, item: dict[str, Any]) -> None:
    client.put_item(
        TableName=table_name,
        Item=codec.encode_item(item),
        ConditionExpression="attribute_not_exists(#pk)",
        ExpressionAttributeNames={"#pk": schema.PARTITION_KEY},
    )


def apply(event: dict[str, Any], client: Any = None) -> tuple[str, dict[str, str]]:
    """Carry out one custom resource request; returns (physical id, response data)."""
    if event["RequestType"] == "Delete":
        return str(event["PhysicalResourceId"]), {}
    request = Request.from_properties(event["ResourceProperties"])
    physical_id = f"{request.table_name}/version-record"
    client = client or boto3.client("dynamodb")
    updated_at = iso_millis(time.time_ns() // 1_000_000)
    item = write_version_record(client, request, updated_at)
    namespace_id = ensure_namespace(
        client,
        request.table_name,
        DEFAULT_NAMESPACE,
        updated_at,
        one_at_a_time=bool(request.replica_regions),
    )
    return physical_id, {
        "SchemaVersion": str(item["schema_version"]),
        "AggregatorVersion": str(item["aggregator_version"]),
        "ClientMinVersion": str(item["client_min_version"]),
        "DefaultNamespaceId": namespace_id,
    }
