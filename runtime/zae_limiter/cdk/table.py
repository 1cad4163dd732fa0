"""The DynamoDB table, built from the runtime's schema module (the only place keys are named)."""

from __future__ import annotations

from typing import Any

from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from zae_limiter import schema

from .props import ZaeLimiterProps


def _string_key(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


def build_table(scope: Construct, props: ZaeLimiterProps) -> dynamodb.Table:
    """The limiter's table: schema keys and indexes, stream, TTL, PITR, encryption, retention."""
    capacity: dict[str, Any] = {}
    if props.billing_mode == dynamodb.BillingMode.PROVISIONED:
        capacity = {"read_capacity": props.read_capacity, "write_capacity": props.write_capacity}
    table = dynamodb.Table(
        scope,
        "Table",
        table_name=props.table_name,
        partition_key=_string_key(schema.PARTITION_KEY),
        sort_key=_string_key(schema.SORT_KEY),
        billing_mode=props.billing_mode,
        stream=dynamodb.StreamViewType[schema.STREAM_VIEW_TYPE],
        time_to_live_attribute=schema.TTL_ATTRIBUTE,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=props.point_in_time_recovery
        ),
        deletion_protection=props.deletion_protection,
        removal_policy=props.removal_policy,
        encryption=(
            dynamodb.TableEncryption.CUSTOMER_MANAGED
            if props.encryption_key
            else dynamodb.TableEncryption.DEFAULT
        ),
        encryption_key=props.encryption_key,
        **capacity,
    )
    for index in schema.INDEXES:
        table.add_global_secondary_index(
            index_name=index.name,
            partition_key=_string_key(index.partition_key),
            sort_key=_string_key(index.sort_key),
            projection_type=dynamodb.ProjectionType[index.projection],
            non_key_attributes=list(index.non_key_attributes) or None,
            **capacity,
        )
    return table


def index_arns(table: dynamodb.ITable) -> list[str]:
    """The ARN of every index, listed one by one (IAM statements never use `/index/*`)."""
    return [f"{table.table_arn}/index/{index.name}" for index in schema.INDEXES]
