"""IAM building blocks shared by the roles and managed policies of the construct."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from zae_limiter import schema
from zae_limiter.dynamo import keys, records

#: Partition keys of the reserved items: version record, namespace registry (by name, by id).
VERSION_RECORD_PARTITION = keys.version_record()[schema.PARTITION_KEY]
RESERVED_PARTITIONS = (VERSION_RECORD_PARTITION, keys.NAMESPACE_NAMES_PK, keys.NAMESPACE_IDS_PK)
#: Partition keys the aggregator reads: the version record, and namespace names by id.
AGGREGATOR_READ_PARTITIONS = (VERSION_RECORD_PARTITION, keys.NAMESPACE_IDS_PK)

#: `dynamodb:LeadingKeys` patterns (`StringLike`: `*` any run, `?` one character). Namespace ids
#: have a fixed length and never contain `#`, so "any namespace" is that many `?`: a pattern can
#: then never match a key of another kind whose later fields happen to contain `#B#` or `#U#`.
ANY_NAMESPACE = "?" * len(records.new_namespace_id())
ANY = "*"


def bucket_partitions(namespace: str) -> str:
    """Every bucket item's partition key in `namespace` (an id, a pattern or a policy variable)."""
    return keys.bucket_partition(namespace, ANY, ANY, 0).split(ANY, 1)[0] + ANY


def usage_partitions(namespace: str) -> str:
    """Every usage snapshot's partition key in `namespace`."""
    return keys.usage_partition(namespace, ANY)


def acquire_partitions(namespace: str) -> list[str]:
    """What the acquire path reads in `namespace`: system, resource and entity config, entity
    records and versions (one partition per entity), the resources with entity config, and
    bucket items. Never usage, audit, operation or manifest items."""
    return [
        keys.system_config(namespace)[schema.PARTITION_KEY],
        keys.resource_config(namespace, ANY)[schema.PARTITION_KEY],
        keys.entity_partition(namespace, ANY),
        keys.entity_config_resources_partition(namespace),
        bucket_partitions(namespace),
    ]


def audit_partitions(namespace: str) -> str:
    """Every audit event's partition key in `namespace` (one partition per subject)."""
    return keys.audit_partition(namespace, ANY)


def alert_partitions(namespace: str) -> str:
    """Every stored threshold alert's partition key in `namespace` (one partition per entity)."""
    return keys.alert_partition(namespace, ANY)


def usage_tombstone_partitions(namespace: str) -> str:
    """Every deleted entity's usage tombstone in `namespace` (the aggregator reads and checks
    them so that no snapshot of a deleted entity is written)."""
    return keys.usage_tombstone(namespace, ANY)[schema.PARTITION_KEY]


#: Aggregation markers, one per stream record applied (`_#AGG#<eventID>`).
MARKER_PARTITIONS = keys.aggregation_marker(ANY)[schema.PARTITION_KEY]

#: What DynamoDB needs of a caller for a table encrypted with a customer-managed key: decrypt to
#: read, and data keys to write. Never Encrypt or ReEncrypt* (DynamoDB does not call them).
KMS_DECRYPT_ACTIONS = ("kms:Decrypt", "kms:DescribeKey")
KMS_ENCRYPT_ACTIONS = (*KMS_DECRYPT_ACTIONS, "kms:GenerateDataKey")


def dynamodb_actions(*names: str) -> list[str]:
    """`dynamodb:<Name>` for each name, sorted (templates and tests compare sorted lists)."""
    return sorted(f"dynamodb:{name}" for name in names)


def statement(
    actions: Sequence[str],
    resources: Sequence[str],
    *,
    sid: str | None = None,
    conditions: dict[str, dict[str, object]] | None = None,
) -> iam.PolicyStatement:
    """An Allow statement with explicit actions and resources."""
    return iam.PolicyStatement(
        sid=sid,
        actions=sorted(actions),
        resources=list(resources),
        conditions=conditions,
    )


def leading_keys(operator: str, values: Sequence[str]) -> dict[str, dict[str, object]]:
    """A condition restricting every item's partition key (`dynamodb:LeadingKeys`)."""
    return {f"ForAllValues:{operator}": {"dynamodb:LeadingKeys": list(values)}}


def kms_statement(key: kms.IKey | None, *, write: bool) -> list[iam.PolicyStatement]:
    """Use of the table's customer-managed key, if it has one (reading, or reading and writing)."""
    if key is None:
        return []
    actions = KMS_ENCRYPT_ACTIONS if write else KMS_DECRYPT_ACTIONS
    return [statement(actions, [key.key_arn], sid="TableKey")]
