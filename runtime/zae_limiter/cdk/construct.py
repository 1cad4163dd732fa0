"""`ZaeLimiter`: everything a zae-limiter deployment needs, as one CDK construct."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Tags
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

import zae_limiter

from .access import AccessPolicies, AccessTargets
from .aggregator import Aggregator, build_archive_bucket
from .monitoring import build_alarms, build_dashboard
from .nag import acknowledge_findings
from .paths import RUNTIME_PACKAGE_DIR
from .props import ZaeLimiterProps
from .table import build_table, index_arns
from .version_record import VersionRecord


def check_runtime_source() -> None:
    """Refuse to synth when the imported `zae_limiter` is not the one that gets bundled.

    The table schema and the recorded versions come from the imported package; the Lambdas get
    `runtime/zae_limiter` from this checkout. They must be the same files.
    """
    imported = Path(zae_limiter.__file__).resolve().parent
    if imported != RUNTIME_PACKAGE_DIR.resolve():
        raise RuntimeError(
            f"zae_limiter is imported from {imported}, but the Lambdas bundle "
            f"{RUNTIME_PACKAGE_DIR}; install this checkout (pip install -e .) or put "
            f"{RUNTIME_PACKAGE_DIR.parent} first on sys.path"
        )


class ZaeLimiter(Construct):
    """Table, aggregator, version record, alarms, dashboard, IAM policies (reference.md §11).

    Pass a `ZaeLimiterProps`, keyword overrides of its fields, or both:
    `ZaeLimiter(self, "RateLimiter", table_name="limits", enable_audit_archive=True)`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        props: ZaeLimiterProps | None = None,
        **overrides: Any,
    ) -> None:
        super().__init__(scope, construct_id)
        check_runtime_source()
        self.props = props = dataclasses.replace(props or ZaeLimiterProps(), **overrides)
        if props.permission_boundary is not None:
            iam.PermissionsBoundary.of(self).apply(props.permission_boundary)

        self.table = build_table(self, props)
        stream_arn = self.table.table_stream_arn
        if stream_arn is None:  # the schema always asks for a stream
            raise RuntimeError("the table has no stream")
        self.stream_arn: str = stream_arn
        self.archive_bucket: s3.Bucket | None = (
            build_archive_bucket(self, props) if props.enable_audit_archive else None
        )
        self.aggregator = Aggregator(
            self, "Aggregator", table=self.table, props=props, archive_bucket=self.archive_bucket
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
        self.access: AccessPolicies | None = None
        if props.create_policies:
            self.access = AccessPolicies(
                self,
                "Access",
                targets=AccessTargets(
                    table_arn=self.table.table_arn,
                    index_arns=tuple(index_arns(self.table)),
                    stream_arn=self.stream_arn,
                    dead_letter_queue_arn=self.aggregator.dead_letter_queue.queue_arn,
                    aggregator_function_arn=self.aggregator.function.function_arn,
                    encryption_key=props.encryption_key,
                ),
                props=props,
            )
        for key, value in props.tags.items():
            Tags.of(self).add(key, value)
        self._add_outputs()
        acknowledge_findings(self)

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
        if self.access is not None:
            for name, policy in self.access.policies.items():
                output_id = "".join(p.capitalize() for p in name.split("-")) + "PolicyArn"
                outputs[output_id] = (policy.managed_policy_arn, f"Managed policy: {name}")
            for name, role in self.access.roles.items():
                outputs[name.capitalize() + "RoleArn"] = (role.role_arn, f"Role: {name}")
        for output_id, (value, description) in outputs.items():
            CfnOutput(self, output_id, value=value, description=description)
