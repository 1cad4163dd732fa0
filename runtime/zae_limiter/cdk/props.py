"""`ZaeLimiterProps`: every property of the `ZaeLimiter` construct, with defaults and checks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns

from zae_limiter import schema
from zae_limiter.usage.windows import DEFAULT_WINDOWS, WINDOW_TYPES

#: Snapshot windows: the defaults are always written (docs/usage.md), others on request.
REQUIRED_SNAPSHOT_WINDOWS: tuple[str, ...] = DEFAULT_WINDOWS

#: The Lambda architectures, by the name CDK context uses (`-c architecture=x86_64`).
ARCHITECTURES = {
    "arm64": lambda_.Architecture.ARM_64,
    "x86_64": lambda_.Architecture.X86_64,
}

#: The retention periods CloudWatch Logs accepts, in days.
LOG_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


@dataclass(frozen=True, kw_only=True)
class ZaeLimiterProps:
    """Properties of `ZaeLimiter` (docs/deploying.md). Extras are marked."""

    table_name: str = schema.DEFAULT_TABLE_NAME
    billing_mode: dynamodb.BillingMode = dynamodb.BillingMode.PAY_PER_REQUEST
    #: Extra: capacity of the table and of each index when `billing_mode` is PROVISIONED.
    read_capacity: int = 5
    write_capacity: int = 5
    point_in_time_recovery: bool = True
    #: On by default: the table holds balances, top-ups and usage (money). Opt out explicitly,
    #: e.g. for a test stack that `cdk destroy` must remove with RemovalPolicy.DESTROY.
    deletion_protection: bool = True
    removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
    encryption_key: kms.IKey | None = None
    snapshot_windows: tuple[str, ...] = REQUIRED_SNAPSHOT_WINDOWS
    usage_retention_days: int = 90
    audit_retention_days: int = 90
    aggregator_memory_mb: int = 256
    aggregator_timeout_seconds: int = 60
    log_retention_days: int = 30
    stream_batch_size: int = 100
    stream_max_batching_window_seconds: int = 5
    #: Extra: retries of a failing stream batch, and the age after which a record goes to the DLQ
    #: (well inside the stream's 24 h, so `zae-limiter usage redrive` can still replay it).
    stream_retry_attempts: int = 5
    stream_max_record_age_seconds: int = 3600
    enable_alarms: bool = True
    alarm_topic: sns.ITopic | None = None
    duration_alarm_threshold_pct: int = 80
    enable_dashboard: bool = True
    enable_tracing: bool = False
    create_policies: bool = True
    create_roles: bool = False
    #: Extra: who may assume the optional roles (default: principals of this account).
    role_principal: iam.IPrincipal | None = None
    namespace_scoped_policies: bool = False
    permission_boundary: iam.IManagedPolicy | None = None
    #: Name formats with `{name}` (app, admin, readonly, ...) and optionally `{table_name}`.
    role_name_format: str | None = None
    policy_name_format: str | None = None
    aggregator_role_arn: str | None = None
    enable_audit_archive: bool = False
    audit_archive_glacier_days: int = 90
    #: Threshold alerts (docs/alerts.md): the aggregator publishes them to `alerts_bus`, or to a
    #: bus of its own when only `enable_alerts` is set (the account's default bus:
    #: `events.EventBus.from_event_bus_name(scope, "Default", "default")`).
    enable_alerts: bool = False
    alerts_bus: events.IEventBus | None = None
    alert_retention_days: int = 90
    allow_aggregator_downgrade: bool = False
    #: Extra: the Lambdas' architecture (the bundle is pure Python; Powertools publishes its
    #: layer for both). `lambda_.Architecture.X86_64` where arm64 is not offered.
    architecture: lambda_.Architecture = lambda_.Architecture.ARM_64
    #: Extra: the Powertools layer to attach instead of the tested release's public one, for
    #: partitions or regions without Powertools' SSM public parameters (e.g. aws-cn).
    powertools_layer_arn: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    #: Multi-Region (docs/multi-region.md): the table as a global table with multi-Region strong
    #: consistency in exactly three Regions, the deploying one and two `replica_regions`, or one
    #: replica and a `witness_region`. The aggregator runs in the deploying Region only.
    replica_regions: tuple[str, ...] = ()
    witness_region: str | None = None

    @property
    def multi_region(self) -> bool:
        return bool(self.replica_regions)

    def __post_init__(self) -> None:
        problems = list(self._problems())
        if problems:
            raise ValueError("invalid ZaeLimiter properties: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        found = []

        def check(ok: bool, message: str) -> None:
            if not ok:
                found.append(message)

        windows = tuple(self.snapshot_windows)
        check(
            set(windows) <= set(WINDOW_TYPES)
            and set(REQUIRED_SNAPSHOT_WINDOWS) <= set(windows)
            and len(set(windows)) == len(windows),
            f"snapshot_windows must be hourly and daily, optionally monthly (got {windows})",
        )
        check(self.usage_retention_days >= 1, "usage_retention_days must be at least 1")
        check(self.audit_retention_days >= 1, "audit_retention_days must be at least 1")
        check(128 <= self.aggregator_memory_mb <= 10240, "aggregator_memory_mb: 128..10240")
        check(1 <= self.aggregator_timeout_seconds <= 900, "aggregator_timeout_seconds: 1..900")
        check(
            self.log_retention_days in LOG_RETENTION,
            f"log_retention_days must be one of {sorted(LOG_RETENTION)}",
        )
        check(1 <= self.stream_batch_size <= 10000, "stream_batch_size: 1..10000")
        check(
            0 <= self.stream_max_batching_window_seconds <= 300,
            "stream_max_batching_window_seconds: 0..300",
        )
        check(0 <= self.stream_retry_attempts <= 10000, "stream_retry_attempts: 0..10000")
        check(
            60 <= self.stream_max_record_age_seconds <= 86400,
            "stream_max_record_age_seconds: 60..86400 (the stream keeps records 24 h)",
        )
        check(1 <= self.duration_alarm_threshold_pct <= 100, "duration_alarm_threshold_pct: 1..100")
        check(self.audit_archive_glacier_days >= 0, "audit_archive_glacier_days must be >= 0")
        check(self.alert_retention_days >= 1, "alert_retention_days must be at least 1")
        check(self.read_capacity >= 1 and self.write_capacity >= 1, "capacities must be >= 1")
        replicas, witness = tuple(self.replica_regions), self.witness_region
        check(
            (not replicas and witness is None)
            or (len(replicas) == 2 and witness is None)
            or (len(replicas) == 1 and witness is not None),
            "multi-Region strong consistency needs exactly three Regions: two replica_regions, "
            "or one replica_region and a witness_region (the deploying Region is the third)",
        )
        check(
            len({*replicas, *([witness] if witness else [])}) == len(replicas) + bool(witness),
            "replica_regions and witness_region must be distinct Regions",
        )
        check(
            not replicas or self.encryption_key is None,
            "replica_regions with a customer-managed encryption_key needs a key per Region; "
            "leave encryption_key unset (the AWS-owned key) for a multi-Region table",
        )
        check(
            not self.create_roles or self.create_policies,
            "create_roles needs create_policies (the roles attach the managed policies)",
        )
        for name, value in (
            ("role_name_format", self.role_name_format),
            ("policy_name_format", self.policy_name_format),
        ):
            check(value is None or "{name}" in value, f"{name} must contain {{name}}")
        return found

    def role_name(self, name: str) -> str | None:
        """The physical name of role `name`, or None to let CloudFormation generate it."""
        return _format(self.role_name_format, name, self.table_name)

    def policy_name(self, name: str) -> str | None:
        """The physical name of managed policy `name`, or None to let CloudFormation name it."""
        return _format(self.policy_name_format, name, self.table_name)


def _format(template: str | None, name: str, table_name: str) -> str | None:
    return None if template is None else template.format(name=name, table_name=table_name)
