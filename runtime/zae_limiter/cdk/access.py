"""IAM managed policies (app, admin, read-only, usage, audit, alerts; optionally
namespace-scoped) and optional roles.

Index ARNs are listed one by one, never `/index/*`. `app` reads only what the acquire path reads
(config, entity records, the namespace registry, the version record and bucket items) and writes
bucket items only: never usage snapshots, audit events or another kind of item. Usage, audit
and alert reads have their own policies (`usage`, `audit`, `alerts`). Namespace-scoped
variants restrict every item to partition keys starting with the caller's namespace id, taken
from the principal tag `zael-namespace-id`, plus read access to the reserved registry and
version record. Every partition-key pattern comes from the key layout
(`zae_limiter.dynamo.keys`); see docs/deploying.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from ..dynamo import keys
from .permissions import (
    ANY,
    ANY_NAMESPACE,
    RESERVED_PARTITIONS,
    VERSION_RECORD_PARTITION,
    acquire_partitions,
    alert_partitions,
    audit_partitions,
    bucket_partitions,
    dynamodb_actions,
    kms_statement,
    leading_keys,
    statement,
    usage_partitions,
)
from .props import ZaeLimiterProps

NAMESPACE_TAG = "zael-namespace-id"
PRINCIPAL_NAMESPACE = "${aws:PrincipalTag/" + NAMESPACE_TAG + "}"

#: The acquire path: read config, entity, namespace and version items; write bucket items only.
#: (Raising `client_min_version` for a gated feature is an admin's write.)
APP_READ_ACTIONS = dynamodb_actions("BatchGetItem", "ConditionCheckItem", "GetItem", "Query")
APP_WRITE_ACTIONS = dynamodb_actions("PutItem", "UpdateItem")
ADMIN_ITEM_ACTIONS = dynamodb_actions(
    "BatchGetItem",
    "BatchWriteItem",
    "ConditionCheckItem",
    "DeleteItem",
    "DescribeTable",
    "DescribeTimeToLive",
    "GetItem",
    "PutItem",
    "Query",
    "Scan",
    "UpdateItem",
)
#: `zae-limiter usage redrive` reads DLQ messages and replays stream ranges.
ADMIN_STREAM_ACTIONS = dynamodb_actions("DescribeStream", "GetRecords", "GetShardIterator")
ADMIN_QUEUE_ACTIONS = sorted(
    [
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
    ]
)
#: `zae-limiter upgrade` replaces the aggregator's code and waits for it.
ADMIN_FUNCTION_ACTIONS = sorted(
    ["lambda:GetFunction", "lambda:GetFunctionConfiguration", "lambda:UpdateFunctionCode"]
)
READ_ONLY_ACTIONS = dynamodb_actions(
    "BatchGetItem", "DescribeTable", "DescribeTimeToLive", "GetItem", "Query", "Scan"
)
#: Registry and version record reads, and DescribeTable (is it multi-Region?): every principal
#: that opens a repository needs them.
RESERVED_READ_ACTIONS = dynamodb_actions("BatchGetItem", "DescribeTable", "GetItem", "Query")
#: Usage snapshots, audit events and alerts: by partition on the table, and through their indexes.
REPORT_READ_ACTIONS = dynamodb_actions("BatchGetItem", "GetItem", "Query")
INDEX_QUERY_ACTIONS = dynamodb_actions("Query")
#: Scan has no partition key to check, so namespace-scoped policies never allow it.
UNSCOPABLE_ACTIONS = frozenset({"dynamodb:Scan"})


@dataclass(frozen=True)
class AccessTargets:
    """The ARNs the policies grant access to."""

    table_arn: str
    index_arns: tuple[str, ...]
    stream_arn: str
    dead_letter_queue_arn: str
    aggregator_function_arn: str
    encryption_key: kms.IKey | None


def _items(
    actions: list[str], targets: AccessTargets, namespace: str | None, sid: str
) -> iam.PolicyStatement:
    """Item actions on the table and every index, limited to a namespace's keys if given."""
    if namespace is None:
        return statement(actions, [targets.table_arn, *targets.index_arns], sid=sid)
    return statement(
        [a for a in actions if a not in UNSCOPABLE_ACTIONS],
        [targets.table_arn, *targets.index_arns],
        sid=sid,
        conditions=leading_keys("StringLike", [namespace, f"{namespace}#*"]),
    )


def _reserved(
    actions: list[str], values: tuple[str, ...], targets: AccessTargets, sid: str
) -> iam.PolicyStatement:
    """Actions on reserved items (registry, version record), by exact partition key."""
    return statement(
        actions, [targets.table_arn], sid=sid, conditions=leading_keys("StringEquals", values)
    )


def _index_arn(targets: AccessTargets, name: str) -> str:
    [arn] = [a for a in targets.index_arns if a.endswith(f"/index/{name}")]
    return arn


def app_statements(targets: AccessTargets, namespace: str | None) -> list[iam.PolicyStatement]:
    """The acquire path: reads of config, entity and bucket items (no index), bucket writes."""
    ns = namespace or ANY_NAMESPACE
    return [
        statement(
            APP_READ_ACTIONS,
            [targets.table_arn],
            sid="Read",
            conditions=leading_keys("StringLike", acquire_partitions(ns)),
        ),
        statement(
            APP_WRITE_ACTIONS,
            [targets.table_arn],
            sid="WriteBuckets",
            conditions=leading_keys("StringLike", [bucket_partitions(ns)]),
        ),
        _reserved(RESERVED_READ_ACTIONS, RESERVED_PARTITIONS, targets, "Registry"),
        *kms_statement(targets.encryption_key, write=True),
    ]


def _report_statements(
    targets: AccessTargets,
    *,
    items: tuple[str, str],
    indexes: list[tuple[str, str, str]],
) -> list[iam.PolicyStatement]:
    """Reads of one kind of item: `items` (sid, partition pattern) on the table, a Query of
    each of `indexes` (sid, index name, partition pattern), the registry; nothing else."""
    item_sid, partitions = items
    return [
        statement(
            REPORT_READ_ACTIONS,
            [targets.table_arn],
            sid=item_sid,
            conditions=leading_keys("StringLike", [partitions]),
        ),
        *(
            statement(
                INDEX_QUERY_ACTIONS,
                [_index_arn(targets, index_name)],
                sid=index_sid,
                conditions=leading_keys("StringLike", [index_keys]),
            )
            for index_sid, index_name, index_keys in indexes
        ),
        _reserved(RESERVED_READ_ACTIONS, RESERVED_PARTITIONS, targets, "Registry"),
        *kms_statement(targets.encryption_key, write=False),
    ]


def usage_statements(targets: AccessTargets, namespace: str | None) -> list[iam.PolicyStatement]:
    """Usage snapshots: an entity's (its partition) and a resource's (the resource index)."""
    ns = namespace or ANY_NAMESPACE
    return _report_statements(
        targets,
        items=("ReadUsage", usage_partitions(ns)),
        indexes=[("UsageByResource", keys.GSI2, keys.resource_usage_index_key(ns, ANY))],
    )


def audit_statements(targets: AccessTargets, namespace: str | None) -> list[iam.PolicyStatement]:
    """Audit events: by subject (its partition) and the namespace's log (the audit log index)."""
    ns = namespace or ANY_NAMESPACE
    return _report_statements(
        targets,
        items=("ReadAudit", audit_partitions(ns)),
        indexes=[("AuditLog", keys.GSI1, keys.audit_log_index_key(ns))],
    )


def alert_statements(targets: AccessTargets, namespace: str | None) -> list[iam.PolicyStatement]:
    """Threshold alerts (`get_alerts`, `alerts list`): an entity's (its partition and its alert
    index) and the namespace's (its alert partition of GSI1); no other item or index key."""
    ns = namespace or ANY_NAMESPACE
    return _report_statements(
        targets,
        items=("ReadAlerts", alert_partitions(ns)),
        indexes=[
            ("AlertsByEntity", keys.GSI3, keys.entity_alerts_index_key(ns, ANY)),
            ("AlertsByNamespace", keys.GSI1, keys.namespace_alerts_index_key(ns)),
        ],
    )


def admin_statements(targets: AccessTargets, namespace: str | None) -> list[iam.PolicyStatement]:
    """Every item operation; unscoped admins also redrive the DLQ and upgrade the aggregator."""
    found = [_items(ADMIN_ITEM_ACTIONS, targets, namespace, "Items")]
    if namespace is None:
        found += [
            statement(ADMIN_STREAM_ACTIONS, [targets.stream_arn], sid="Stream"),
            statement(ADMIN_QUEUE_ACTIONS, [targets.dead_letter_queue_arn], sid="DeadLetters"),
            statement(
                ADMIN_FUNCTION_ACTIONS, [targets.aggregator_function_arn], sid="AggregatorCode"
            ),
        ]
    else:
        found += [
            _reserved(RESERVED_READ_ACTIONS, RESERVED_PARTITIONS, targets, "Registry"),
            _reserved(
                dynamodb_actions("UpdateItem"),
                (VERSION_RECORD_PARTITION,),
                targets,
                "VersionRecord",
            ),
        ]
    return found + kms_statement(targets.encryption_key, write=True)


def read_only_statements(
    targets: AccessTargets, namespace: str | None
) -> list[iam.PolicyStatement]:
    """Reads and queries."""
    found = [_items(READ_ONLY_ACTIONS, targets, namespace, "Read")]
    if namespace is not None:
        found.append(_reserved(RESERVED_READ_ACTIONS, RESERVED_PARTITIONS, targets, "Registry"))
    return found + kms_statement(targets.encryption_key, write=False)


POLICY_KINDS = {
    "app": (app_statements, "zae-limiter application access: the acquire path"),
    "admin": (admin_statements, "zae-limiter administration: every item operation"),
    "readonly": (read_only_statements, "zae-limiter read-only access"),
    "usage": (usage_statements, "zae-limiter usage snapshots: read"),
    "audit": (audit_statements, "zae-limiter audit events: read"),
    "alerts": (alert_statements, "zae-limiter threshold alerts: read"),
}
#: The policies `create_roles` makes a role for.
ROLE_KINDS = ("app", "admin", "readonly")


class AccessPolicies(Construct):
    """The managed policies (and optional roles) of a deployment.

    `policies` maps app/admin/readonly/usage/audit/alerts (and app-namespace/... when
    namespace-scoped variants are on) to the managed policy; `roles` maps app/admin/readonly to
    the role attaching it.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        targets: AccessTargets,
        props: ZaeLimiterProps,
    ) -> None:
        super().__init__(scope, construct_id)
        self.policies: dict[str, iam.ManagedPolicy] = {}
        self.roles: dict[str, iam.Role] = {}
        variants: list[tuple[str, str | None]] = [(kind, None) for kind in POLICY_KINDS]
        if props.namespace_scoped_policies:
            variants += [(kind, PRINCIPAL_NAMESPACE) for kind in POLICY_KINDS]
        for kind, namespace in variants:
            build, description = POLICY_KINDS[kind]
            name = kind if namespace is None else f"{kind}-namespace"
            if namespace is not None:
                description += f" (the namespace in principal tag {NAMESPACE_TAG})"
            self.policies[name] = iam.ManagedPolicy(
                self,
                _construct_id(name) + "Policy",
                managed_policy_name=props.policy_name(name),
                description=description,
                statements=build(targets, namespace),
            )
        if props.create_roles:
            principal = props.role_principal or iam.AccountRootPrincipal()
            for kind in ROLE_KINDS:
                self.roles[kind] = iam.Role(
                    self,
                    _construct_id(kind) + "Role",
                    role_name=props.role_name(kind),
                    assumed_by=principal,
                    description=POLICY_KINDS[kind][1],
                    managed_policies=[self.policies[kind]],
                )


def _construct_id(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", " ").split())
