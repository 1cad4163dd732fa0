"""The stacks the CDK tests synthesize (imported by conftest, which sets the environment first)."""

from __future__ import annotations

from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk.assertions import Template

from zae_limiter.cdk import ZaeLimiter, ZaeLimiterStack


class FullStack(cdk.Stack):
    """Every optional feature on, with the supporting resources a user would pass in."""

    def __init__(self, scope: cdk.App, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(self, "TableKey", enable_key_rotation=True)
        self.topic = sns.Topic(self, "AlarmTopic", enforce_ssl=True, master_key=self.key)
        self.boundary = iam.ManagedPolicy(
            self,
            "Boundary",
            statements=[
                iam.PolicyStatement(
                    actions=["dynamodb:GetItem"],
                    resources=["arn:aws:dynamodb:us-east-1:123456789012:table/zl-full"],
                )
            ],
        )
        self.limiter = ZaeLimiter(
            self,
            "Limiter",
            table_name="zl-full",
            billing_mode=dynamodb.BillingMode.PROVISIONED,
            read_capacity=7,
            write_capacity=9,
            deletion_protection=False,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            encryption_key=self.key,
            snapshot_windows=("hourly", "daily", "monthly"),
            usage_retention_days=30,
            audit_retention_days=400,
            aggregator_memory_mb=512,
            aggregator_timeout_seconds=120,
            log_retention_days=14,
            stream_batch_size=250,
            stream_max_batching_window_seconds=10,
            alarm_topic=self.topic,
            duration_alarm_threshold_pct=50,
            enable_tracing=True,
            create_roles=True,
            namespace_scoped_policies=True,
            permission_boundary=self.boundary,
            role_name_format="{table_name}-{name}-role",
            policy_name_format="{table_name}-{name}",
            enable_audit_archive=True,
            audit_archive_glacier_days=45,
            allow_aggregator_downgrade=True,
            tags={"team": "payments"},
        )


#: A role the aggregator is given instead of its own, and a layer instead of the public one.
SUPPLIED_ROLE_ARN = "arn:aws:iam::123456789012:role/zl-aggregator"
SUPPLIED_LAYER_ARN = "arn:aws-cn:lambda:cn-north-1:498634801083:layer:Powertools:27"


@dataclass(frozen=True)
class Synthesized:
    """The session's app: `default` is `ZaeLimiterStack` as `cdk deploy` makes it; `full` has
    every option on; `minimal` turns the optional parts off and brings its own role and layer."""

    default_stack: ZaeLimiterStack
    full_stack: FullStack
    default: Template
    full: Template
    minimal: Template
