"""The table as a global table with multi-Region strong consistency (docs/multi-region.md).

`ZaeLimiter(..., replica_regions=[...], witness_region=...)` builds the table as a `TableV2` with
`MultiRegionConsistency.STRONG` in exactly three Regions: the deploying Region and two replicas,
or one replica and a witness. Such a table has no TTL (the sweeper does its job: the aggregator,
in the deploying Region only, runs it on a schedule) and no transactions (the library detects the
table and writes one item at a time). Every Region gets outputs: its table ARN and the endpoint
its processes open the table through (`Repository.open(region=...)`).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, Fn, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from zae_limiter import schema

from .permissions import dynamodb_actions, statement
from .props import ZaeLimiterProps
from .schedules import invoke_every

#: What the aggregator's role may do besides its own writes when it also sweeps (admin/sweeper.py):
#: walk the table, delete what TTL would have, finish changes left half done (any item a change
#: writes). Its snapshot writes on such a table (usage/snapshot_writes.py) read and write their
#: markers in batches through the same grant. On the table only: neither uses an index.
SWEEPER_ACTIONS = dynamodb_actions(
    "BatchGetItem", "BatchWriteItem", "DeleteItem", "GetItem", "PutItem", "Query", "Scan",
    "UpdateItem",
)  # fmt: skip
#: The aggregator's event that runs the sweeper (lambdas/aggregator/handler.py).
SWEEP_EVENT = {"zae_limiter": "sweep"}
SWEEP_EVERY = Duration.minutes(5)
#: The aggregator's environment: the replica Regions (it opens no DescribeTable to learn them).
ENV_REPLICA_REGIONS = "ZAEL_REPLICA_REGIONS"


def _string_key(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


def build_global_table(scope: Construct, props: ZaeLimiterProps) -> dynamodb.TableV2:
    """The limiter's table in three Regions with strong consistency: the schema's keys and
    indexes, the stream (the aggregator reads the deploying Region's), no TTL."""
    billing: Any = dynamodb.Billing.on_demand()
    if props.billing_mode == dynamodb.BillingMode.PROVISIONED:
        billing = dynamodb.Billing.provisioned(
            read_capacity=dynamodb.Capacity.fixed(props.read_capacity),
            write_capacity=dynamodb.Capacity.autoscaled(max_capacity=props.write_capacity),
        )
    recovery = dynamodb.PointInTimeRecoverySpecification(
        point_in_time_recovery_enabled=props.point_in_time_recovery
    )
    return dynamodb.TableV2(
        scope,
        "Table",
        table_name=props.table_name,
        partition_key=_string_key(schema.PARTITION_KEY),
        sort_key=_string_key(schema.SORT_KEY),
        billing=billing,
        dynamo_stream=dynamodb.StreamViewType[schema.STREAM_VIEW_TYPE],
        multi_region_consistency=dynamodb.MultiRegionConsistency.STRONG,
        replicas=[
            dynamodb.ReplicaTableProps(region=region, point_in_time_recovery_specification=recovery)
            for region in props.replica_regions
        ],
        witness_region=props.witness_region,
        point_in_time_recovery_specification=recovery,
        deletion_protection=props.deletion_protection,
        removal_policy=props.removal_policy,
        global_secondary_indexes=[
            dynamodb.GlobalSecondaryIndexPropsV2(
                index_name=index.name,
                partition_key=_string_key(index.partition_key),
                sort_key=_string_key(index.sort_key),
                projection_type=dynamodb.ProjectionType[index.projection],
                non_key_attributes=list(index.non_key_attributes) or None,
            )
            for index in schema.INDEXES
        ],
    )


def table_arn_in_every_region(scope: Construct, props: ZaeLimiterProps) -> str:
    """The table's ARN with any Region: one IAM resource for every replica."""
    return Stack.of(scope).format_arn(
        service="dynamodb", region="*", resource="table", resource_name=props.table_name
    )


def schedule_sweeper(scope: Construct, function: lambda_.IFunction, table_arn: str) -> events.Rule:
    """Run the sweeper every `SWEEP_EVERY` in the aggregator, with the rights it needs."""
    function.add_to_role_policy(statement(SWEEPER_ACTIONS, [table_arn], sid="Sweeper"))
    return invoke_every(
        scope,
        "Sweeper",
        every=SWEEP_EVERY,
        function=function,
        event=SWEEP_EVENT,
        description="zae-limiter sweeper: what TTL and transactions do on other tables",
    )


def region_outputs(scope: Construct, table: dynamodb.TableV2, props: ZaeLimiterProps) -> None:
    """Per Region: the table ARN and the endpoint its processes use."""
    regions = [Aws.REGION, *props.replica_regions]
    for position, region in enumerate(regions):
        label = (
            "Deploying"
            if position == 0
            else "".join(part.capitalize() for part in region.split("-"))
        )
        arn = table.table_arn if position == 0 else table.replica(region).table_arn
        CfnOutput(scope, f"{label}TableArn", value=arn, description=f"Table replica in {region}")
        CfnOutput(
            scope,
            f"{label}Endpoint",
            value=Fn.join("", ["https://dynamodb.", region, ".", Aws.URL_SUFFIX]),
            description="Processes there open the table with Repository.open(region=<Region>)",
        )
    if props.witness_region:
        CfnOutput(
            scope,
            "WitnessRegion",
            value=props.witness_region,
            description="The witness: a quorum member that serves no requests",
        )
