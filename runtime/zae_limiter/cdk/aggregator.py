"""The usage aggregator: a Lambda on the table's stream, with its DLQ, role, logs and archive."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from zae_limiter import schema
from zae_limiter.dynamo import keys
from zae_limiter.usage.records import ARCHIVE_PREFIX

from .bundling import RUNTIME, runtime_lambda_code
from .paths import AGGREGATOR_DIR, HANDLER
from .permissions import (
    AGGREGATOR_READ_PARTITIONS,
    ANY_NAMESPACE,
    MARKER_PARTITIONS,
    alert_partitions,
    bucket_partitions,
    dynamodb_actions,
    kms_statement,
    leading_keys,
    statement,
    usage_partitions,
    usage_tombstone_partitions,
)
from .props import LOG_RETENTION, ZaeLimiterProps
from .schedules import invoke_every

#: The Powertools for AWS Lambda (Python) release the aggregator is tested with (the lock pins
#: the same release; a test checks both). Its public layer is found at deploy time through the
#: SSM public parameter Powertools publishes per architecture, Python version and release, whose
#: value is that release's layer version ARN in the deployment's region.
POWERTOOLS_RELEASE = "3.37.0"
POWERTOOLS_PYTHON = "python3.12"
POWERTOOLS_PARAMETER = "/aws/service/powertools/python/{architecture}/{python}/{release}"

#: CloudWatch namespace and service name of the aggregator's EMF metrics and logs.
METRIC_NAMESPACE = "ZaeLimiter"
SERVICE_NAME = "zae-limiter-aggregator"

#: Environment variables the aggregator reads.
ENV_TABLE_NAME = "TABLE_NAME"
ENV_SNAPSHOT_WINDOWS = "SNAPSHOT_WINDOWS"
ENV_USAGE_RETENTION_DAYS = "USAGE_RETENTION_DAYS"
ENV_ARCHIVE_BUCKET = "ARCHIVE_BUCKET"
ENV_ALERTS_BUS = "ALERTS_BUS"
ENV_ALERT_RETENTION_DAYS = "ALERT_RETENTION_DAYS"

#: Table operations of the aggregator: version record and namespace reads; deleted entities'
#: usage tombstones read and checked (a ConditionCheck in each transaction); snapshots and
#: idempotency markers written in transactions (TransactWriteItems needs Put/UpdateItem per
#: item); threshold alerts stored, claimed and marked published (docs/alerts.md); crossings held
#: in their one partition (stored, found due, removed) and the bucket item a due crossing is
#: checked on (read only).
AGGREGATOR_READ_ACTIONS = dynamodb_actions("GetItem")
AGGREGATOR_HELD_ACTIONS = dynamodb_actions("GetItem", "PutItem", "Query")
AGGREGATOR_TOMBSTONE_ACTIONS = dynamodb_actions("ConditionCheckItem", "GetItem")
AGGREGATOR_WRITE_ACTIONS = dynamodb_actions("PutItem", "UpdateItem")

#: The event that makes the aggregator confirm held threshold crossings (lambdas/aggregator/
#: handler.py), and how often: a crossing whose hold passed is stored even when no stream batch
#: comes (docs/alerts.md, "Only consumption that stays").
HELD_ALERTS_EVENT = {"zae_limiter": "held-alerts"}
HELD_ALERTS_EVERY = Duration.minutes(1)

#: An attribute only audit event items carry (`zae_limiter.audit.event_item`).
AUDIT_EVENT_ATTRIBUTE = "event_id"


def stream_filters(*, archive: bool) -> list[Mapping[str, Any]]:
    """Which stream records reach the aggregator.

    Always: bucket items (`SK` is the bucket sort key) inserted or modified. With archiving, also
    removals of audit events (old image has the audit event id and a TTL): Lambda filters cannot
    match "PK contains `#A#`", so audit items are recognised by an attribute only they carry.
    The aggregator still checks each record (TTL removal, audit key) itself.
    """
    filters = [
        lambda_.FilterCriteria.filter(
            {
                "eventName": lambda_.FilterRule.or_("INSERT", "MODIFY"),
                "dynamodb": {
                    "Keys": {schema.SORT_KEY: {"S": lambda_.FilterRule.is_equal(keys.BUCKET)}}
                },
            }
        )
    ]
    if archive:
        filters.append(
            lambda_.FilterCriteria.filter(
                {
                    "eventName": lambda_.FilterRule.is_equal("REMOVE"),
                    "dynamodb": {
                        "OldImage": {
                            AUDIT_EVENT_ATTRIBUTE: {"S": lambda_.FilterRule.exists()},
                            schema.TTL_ATTRIBUTE: {"N": lambda_.FilterRule.exists()},
                        },
                    },
                }
            )
        )
    return filters


def powertools_parameter_name(architecture: lambda_.Architecture) -> str:
    """The SSM public parameter holding the tested Powertools release's layer ARN."""
    return POWERTOOLS_PARAMETER.format(
        architecture=architecture.name, python=POWERTOOLS_PYTHON, release=POWERTOOLS_RELEASE
    )


def powertools_layer_arn(scope: Construct, architecture: lambda_.Architecture) -> str:
    """The tested release's public Powertools layer in the deployment's region, for
    `architecture` (resolved by CloudFormation from the SSM public parameter at deploy)."""
    return ssm.StringParameter.value_for_string_parameter(
        scope, powertools_parameter_name(architecture)
    )


def aggregator_statements(table_arn: str, props: ZaeLimiterProps) -> list[iam.PolicyStatement]:
    """Reads of the version record and namespace registry, and of deleted entities' usage
    tombstones; writes of usage snapshots, aggregation markers and threshold alerts only (never
    buckets, config, entities or the version record). Alerts are stored whether or not a bus
    publishes them, so their statement is always there."""
    return [
        statement(
            AGGREGATOR_READ_ACTIONS,
            [table_arn],
            sid="ReadReservedItems",
            conditions=leading_keys("StringEquals", AGGREGATOR_READ_PARTITIONS),
        ),
        statement(
            AGGREGATOR_TOMBSTONE_ACTIONS,
            [table_arn],
            sid="CheckDeletedEntities",
            conditions=leading_keys("StringLike", [usage_tombstone_partitions(ANY_NAMESPACE)]),
        ),
        statement(
            AGGREGATOR_WRITE_ACTIONS,
            [table_arn],
            sid="WriteSnapshotsAndMarkers",
            conditions=leading_keys(
                "StringLike", [usage_partitions(ANY_NAMESPACE), MARKER_PARTITIONS]
            ),
        ),
        statement(
            AGGREGATOR_WRITE_ACTIONS,
            [table_arn],
            sid="WriteAlerts",
            conditions=leading_keys("StringLike", [alert_partitions(ANY_NAMESPACE)]),
        ),
        statement(
            AGGREGATOR_HELD_ACTIONS,
            [table_arn],
            sid="HoldCrossings",
            conditions=leading_keys("StringEquals", [keys.HELD_CROSSINGS_PK]),
        ),
        statement(
            AGGREGATOR_READ_ACTIONS,
            [table_arn],
            sid="ReadBucketsOfHeldCrossings",
            conditions=leading_keys("StringLike", [bucket_partitions(ANY_NAMESPACE)]),
        ),
        *kms_statement(props.encryption_key, write=True),
    ]


def function_log_group(scope: Construct, props: ZaeLimiterProps) -> logs.LogGroup:
    """A function's log group with the configured retention (removed with the stack)."""
    return logs.LogGroup(
        scope,
        "LogGroup",
        retention=LOG_RETENTION[props.log_retention_days],
        removal_policy=RemovalPolicy.DESTROY,
    )


def lambda_role(scope: Construct, props: ZaeLimiterProps, name: str, description: str) -> iam.Role:
    """A Lambda execution role with no managed policies (statements are added explicitly)."""
    return iam.Role(
        scope,
        "Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        role_name=props.role_name(name),
        description=description,
    )


def python_function(
    scope: Construct,
    *,
    props: ZaeLimiterProps,
    description: str,
    code_dir: Path,
    memory_mb: int,
    timeout_seconds: int,
    role: iam.IRole,
    log_group: logs.ILogGroup,
    **extra: Any,
) -> lambda_.Function:
    """A Lambda function of this construct: the runtime package bundled, JSON logs in its group."""
    return lambda_.Function(
        scope,
        "Function",
        description=description,
        runtime=RUNTIME,
        architecture=props.architecture,
        handler=HANDLER,
        code=runtime_lambda_code(code_dir),
        memory_size=memory_mb,
        timeout=Duration.seconds(timeout_seconds),
        role=role,
        log_group=log_group,
        logging_format=lambda_.LoggingFormat.JSON,
        **extra,
    )


def build_archive_bucket(scope: Construct, props: ZaeLimiterProps) -> s3.Bucket:
    """The audit archive: encrypted, private, TLS-only, moved to Glacier Instant Retrieval."""
    return s3.Bucket(
        scope,
        "AuditArchive",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        enforce_ssl=True,
        removal_policy=props.removal_policy,
        lifecycle_rules=[
            s3.LifecycleRule(
                id="GlacierInstantRetrieval",
                transitions=[
                    s3.Transition(
                        storage_class=s3.StorageClass.GLACIER_INSTANT_RETRIEVAL,
                        transition_after=Duration.days(props.audit_archive_glacier_days),
                    )
                ],
            )
        ],
    )


class AggregatorFunction(Construct):
    """The aggregator Lambda, its stream event source, DLQ, log group and role."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        props: ZaeLimiterProps,
        archive_bucket: s3.IBucket | None,
        alerts_bus: events.IEventBus | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.log_group = function_log_group(self, props)
        self.role: iam.IRole
        if props.aggregator_role_arn:
            self.role = iam.Role.from_role_arn(
                self, "Role", props.aggregator_role_arn, mutable=False
            )
        else:
            self.role = lambda_role(
                self, props, "aggregator", "zae-limiter aggregator: stream in, snapshots out"
            )

        environment = {
            ENV_TABLE_NAME: table.table_name,
            ENV_SNAPSHOT_WINDOWS: ",".join(props.snapshot_windows),
            ENV_USAGE_RETENTION_DAYS: str(props.usage_retention_days),
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRIC_NAMESPACE,
        }
        if archive_bucket is not None:
            environment[ENV_ARCHIVE_BUCKET] = archive_bucket.bucket_name
        if alerts_bus is not None:
            environment[ENV_ALERTS_BUS] = alerts_bus.event_bus_name
            environment[ENV_ALERT_RETENTION_DAYS] = str(props.alert_retention_days)

        self.function = python_function(
            self,
            props=props,
            description="zae-limiter usage aggregator (table stream -> usage snapshots)",
            code_dir=AGGREGATOR_DIR,
            memory_mb=props.aggregator_memory_mb,
            timeout_seconds=props.aggregator_timeout_seconds,
            role=self.role,
            log_group=self.log_group,
            layers=[
                lambda_.LayerVersion.from_layer_version_arn(
                    self,
                    "Powertools",
                    props.powertools_layer_arn or powertools_layer_arn(self, props.architecture),
                )
            ],
            tracing=lambda_.Tracing.ACTIVE if props.enable_tracing else None,
            environment=environment,
        )
        self.log_group.grant_write(self.role)
        for policy_statement in aggregator_statements(table.table_arn, props):
            self.function.add_to_role_policy(policy_statement)
        if archive_bucket is not None:
            self.function.add_to_role_policy(
                statement(
                    ["s3:PutObject"],
                    [archive_bucket.arn_for_objects(f"{ARCHIVE_PREFIX}/*")],
                    sid="AuditArchive",
                )
            )

        if alerts_bus is not None:  # threshold alerts: events:PutEvents on this bus only
            self.function.add_to_role_policy(
                statement(["events:PutEvents"], [alerts_bus.event_bus_arn], sid="AlertsPublish")
            )

        self.event_source = event_sources.DynamoEventSource(
            table,
            starting_position=lambda_.StartingPosition.TRIM_HORIZON,
            batch_size=props.stream_batch_size,
            max_batching_window=Duration.seconds(props.stream_max_batching_window_seconds),
            bisect_batch_on_error=True,
            retry_attempts=props.stream_retry_attempts,
            max_record_age=Duration.seconds(props.stream_max_record_age_seconds),
            report_batch_item_failures=True,
            on_failure=event_sources.SqsDlq(self.dead_letter_queue),
            filters=stream_filters(archive=archive_bucket is not None),
        )
        self.function.add_event_source(self.event_source)
        self.held_alerts = invoke_every(
            self,
            "HeldAlerts",
            every=HELD_ALERTS_EVERY,
            function=self.function,
            event=HELD_ALERTS_EVENT,
            description="zae-limiter: confirm threshold crossings no refund can undo any more",
        )
        (self.event_source_mapping,) = [
            child
            for child in self.function.node.children
            if isinstance(child, lambda_.EventSourceMapping)
        ]
