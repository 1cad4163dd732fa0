"""`ZaeLimiter`: everything a zae-limiter deployment needs, as one CDK construct."""

from __future__ import annotations

import dataclasses
from typing import Any

from aws_cdk import Aws, CfnOutput, Fn, Tags
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from zae_limiter import schema

from .access import POLICY_KINDS, PRINCIPAL_NAMESPACE, AccessPolicies, AccessTargets
from .aggregator import AggregatorFunction, build_archive_bucket
from .monitoring import build_alarms, build_dashboard
from .multi_region import (
    ENV_REPLICA_REGIONS,
    build_global_table,
    region_outputs,
    schedule_sweeper,
    table_arn_in_every_region,
)
from .nag import acknowledge_findings
from .props import ZaeLimiterProps
from .table import build_table
from .version_record import VersionRecord


class ZaeLimiter(Construct):
    """Table, aggregator, version record, alarms, dashboard, IAM policies (docs/deploying.md).

    Pass a `ZaeLimiterProps`, keyword overrides of its fields, or both:
    `ZaeLimiter(self, "RateLimiter", table_name="limits", enable_audit_archive=True)`.
    Give your own roles access with `grant_acquire`, `grant_admin`, `grant_read`,
    `grant_read_usage`, `grant_read_audit` and `grant_read_alerts`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: ZaeLimiterProps | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        self.props = props = dataclasses.replace(props or ZaeLimiterProps(), **overrides)
        if props.permission_boundary is not None:
            iam.PermissionsBoundary.of(self).apply(props.permission_boundary)

        self.table: dynamodb.ITable = (
            build_global_table(self, props) if props.multi_region else build_table(self, props)
        )
        stream_arn = self.table.table_stream_arn
        if stream_arn is None:  # the schema always asks for a stream
            raise RuntimeError("the table has no stream")
        self.stream_arn: str = stream_arn
        self.archive_bucket: s3.Bucket | None = (
            build_archive_bucket(self, props) if props.enable_audit_archive else None
        )
        self.alerts_bus: events.IEventBus | None = props.alerts_bus
        if self.alerts_bus is None and props.enable_alerts:
            self.alerts_bus = events.EventBus(self, "AlertsBus")
        self.aggregator = AggregatorFunction(
            self,
            "Aggregator",
            table=self.table,
            props=props,
            archive_bucket=self.archive_bucket,
            alerts_bus=self.alerts_bus,
        )
        self.version_record = VersionRecord(
            self,
            "VersionRecord",
            table=self.table,
            props=props,
            aggregator_function=self.aggregator.function,
            dead_letter_queue=self.aggregator.dead_letter_queue,
        )
        # The aggregator reads the version record first: start the stream only once it exists.
        self.aggregator.event_source_mapping.node.add_dependency(self.version_record.resource)
        self.alarms: list[cw.Alarm] = (
            build_alarms(self, aggregator=self.aggregator, table=self.table, props=props)
            if props.enable_alarms
            else []
        )
        self.dashboard: cw.Dashboard | None = (
            build_dashboard(
                self,
                aggregator=self.aggregator,
                table=self.table,
                alarms=self.alarms,
                props=props,
            )
            if props.enable_dashboard
            else None
        )
        table_arn = self.table.table_arn
        self.sweeper: events.Rule | None = None
        if props.multi_region:  # every Region's replica; the sweeper instead of TTL
            table_arn = table_arn_in_every_region(self, props)
            regions = Fn.join(",", [Aws.REGION, *props.replica_regions])
            self.aggregator.function.add_environment(ENV_REPLICA_REGIONS, regions)
            self.sweeper = schedule_sweeper(self, self.aggregator.function, table_arn)
        self.access_targets = AccessTargets(
            table_arn=table_arn,
            index_arns=tuple(f"{table_arn}/index/{index.name}" for index in schema.INDEXES),
            stream_arn=self.stream_arn,
            dead_letter_queue_arn=self.aggregator.dead_letter_queue.queue_arn,
            aggregator_function_arn=self.aggregator.function.function_arn,
            encryption_key=props.encryption_key,
        )
        self.access: AccessPolicies | None = None
        if props.create_policies:
            self.access = AccessPolicies(self, "Access", targets=self.access_targets, props=props)
        for key, value in props.tags.items():
            Tags.of(self).add(key, value)
        self._add_outputs()
        acknowledge_findings(self)

    def grant_acquire(
        self, grantee: iam.IGrantable, *, namespace_scoped: bool = False
    ) -> iam.Grant:
        """Let `grantee` run the acquire path (the `app` policy): read config, write buckets.

        With `namespace_scoped`, only in the namespace whose id is the principal's
        `zael-namespace-id` tag.
        """
        return self._grant(grantee, "app", namespace_scoped)

    def grant_admin(self, grantee: iam.IGrantable, *, namespace_scoped: bool = False) -> iam.Grant:
        """Let `grantee` administer the deployment (the `admin` policy): every item operation;
        unscoped, also `usage redrive` (stream and DLQ) and `upgrade` (the aggregator's code)."""
        return self._grant(grantee, "admin", namespace_scoped)

    def grant_read(self, grantee: iam.IGrantable, *, namespace_scoped: bool = False) -> iam.Grant:
        """Let `grantee` read and query every item (the `readonly` policy)."""
        return self._grant(grantee, "readonly", namespace_scoped)

    def grant_read_usage(
        self, grantee: iam.IGrantable, *, namespace_scoped: bool = False
    ) -> iam.Grant:
        """Let `grantee` read usage snapshots (the `usage` policy): `get_usage_snapshots` and
        `get_usage_summary`, by entity or by resource."""
        return self._grant(grantee, "usage", namespace_scoped)

    def grant_read_audit(
        self, grantee: iam.IGrantable, *, namespace_scoped: bool = False
    ) -> iam.Grant:
        """Let `grantee` read audit events (the `audit` policy): by subject, and the
        namespace's recent changes."""
        return self._grant(grantee, "audit", namespace_scoped)

    def grant_read_alerts(
        self, grantee: iam.IGrantable, *, namespace_scoped: bool = False
    ) -> iam.Grant:
        """Let `grantee` read threshold alerts (the `alerts` policy): `get_alerts` and
        `zae-limiter alerts list`, by entity or for the namespace; for a dashboard or an
        on-call tool."""
        return self._grant(grantee, "alerts", namespace_scoped)

    def _grant(self, grantee: iam.IGrantable, kind: str, namespace_scoped: bool) -> iam.Grant:
        """Add the statements of policy `kind` to `grantee`'s own policy."""
        build = POLICY_KINDS[kind][0]
        statements = build(self.access_targets, PRINCIPAL_NAMESPACE if namespace_scoped else None)
        grant: iam.Grant | None = None
        for policy_statement in statements:
            added = iam.Grant.add_to_principal(
                grantee=grantee,
                actions=policy_statement.actions,
                resource_arns=policy_statement.resources,
                conditions=policy_statement.conditions or None,
            )
            grant = added if grant is None else grant.combine(added)
        assert grant is not None  # every policy has statements
        return grant

    def _add_outputs(self) -> None:
        outputs: dict[str, tuple[str, str]] = {
            "TableName": (self.table.table_name, "DynamoDB table (ZAEL_TABLE)"),
            "TableArn": (self.table.table_arn, "DynamoDB table ARN"),
            "StreamArn": (self.stream_arn, "Table stream ARN"),
            "AggregatorFunctionName": (self.aggregator.function.function_name, "Aggregator"),
            "AggregatorFunctionArn": (self.aggregator.function.function_arn, "Aggregator ARN"),
            "DeadLetterQueueUrl": (self.aggregator.dead_letter_queue.queue_url, "Aggregator DLQ"),
        }
        if self.dashboard is not None:
            outputs["DashboardName"] = (self.dashboard.dashboard_name, "Usage dashboard")
        if self.archive_bucket is not None:
            outputs["AuditArchiveBucket"] = (self.archive_bucket.bucket_name, "Audit archive")
        if self.alerts_bus is not None:
            outputs["AlertsBusName"] = (self.alerts_bus.event_bus_name, "Threshold alerts bus")
        if self.access is not None:
            for name, policy in self.access.policies.items():
                output_id = "".join(p.capitalize() for p in name.split("-")) + "PolicyArn"
                outputs[output_id] = (policy.managed_policy_arn, f"Managed policy: {name}")
            for name, role in self.access.roles.items():
                outputs[name.capitalize() + "RoleArn"] = (role.role_arn, f"Role: {name}")
        for output_id, (value, description) in outputs.items():
            CfnOutput(self, output_id, value=value, description=description)
        if isinstance(self.table, dynamodb.TableV2) and self.props.multi_region:
            region_outputs(self, self.table, self.props)
