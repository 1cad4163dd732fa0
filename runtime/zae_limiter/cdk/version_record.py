"""The deploy-time custom resource that writes the version record and registers `default`."""

from __future__ import annotations

from aws_cdk import Aws, CustomResource, Fn
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from zae_limiter import schema, versioning

from .aggregator import function_log_group, lambda_role, python_function
from .paths import VERSION_RECORD_DIR
from .permissions import (
    RESERVED_PARTITIONS,
    dynamodb_actions,
    kms_statement,
    leading_keys,
    statement,
)
from .props import ZaeLimiterProps

RESOURCE_TYPE = "Custom::ZaeLimiterVersionRecord"

VERSION_RECORD_ACTIONS = dynamodb_actions("GetItem", "PutItem", "UpdateItem")


class VersionRecord(Construct):
    """Writes the version record on every create/update; refuses aggregator downgrades.

    The versions are properties, read at synth from the runtime package that is bundled: a new
    version re-runs the resource, and a rollback re-runs it with the previous versions.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        table: dynamodb.ITable,
        props: ZaeLimiterProps,
        aggregator_function: lambda_.IFunction,
        dead_letter_queue: sqs.IQueue,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_group = function_log_group(self, props)
        self.role = lambda_role(
            self, props, "version-record", "zae-limiter deploy step: writes the version record"
        )
        self.function = python_function(
            self,
            props=props,
            description="zae-limiter deploy step: writes the version record, registers default",
            code_dir=VERSION_RECORD_DIR,
            memory_mb=128,
            timeout_seconds=60,
            role=self.role,
            log_group=self.log_group,
        )
        self.log_group.grant_write(self.role)
        for policy_statement in [
            statement(
                VERSION_RECORD_ACTIONS,
                [table.table_arn],
                sid="ReservedItems",
                conditions=leading_keys("StringEquals", RESERVED_PARTITIONS),
            ),
            *kms_statement(props.encryption_key, write=True),
        ]:
            self.role.add_to_principal_policy(policy_statement)

        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.function.function_arn,
            resource_type=RESOURCE_TYPE,
            properties={
                "TableName": table.table_name,
                "AggregatorVersion": versioning.LIBRARY_VERSION,
                "SchemaVersion": schema.SCHEMA_VERSION,
                "AggregatorFunction": aggregator_function.function_name,
                "DeadLetterQueueUrl": dead_letter_queue.queue_url,
                "AllowAggregatorDowngrade": props.allow_aggregator_downgrade,
                "AuditRetentionDays": props.audit_retention_days,
                "UsageRetentionDays": props.usage_retention_days,
                **(
                    {
                        "MultiRegionConsistency": "STRONG",
                        "ReplicaRegions": Fn.join(",", [Aws.REGION, *props.replica_regions]),
                    }
                    if props.multi_region
                    else {}
                ),
            },
        )
        # The policy must exist before the function runs.
        self.resource.node.add_dependency(self.role)
