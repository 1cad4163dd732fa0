"""The synthesized templates: table, aggregator, DLQ, alarms, dashboard, policies, custom resource.

`synthesized.default` is `ZaeLimiterStack` with default properties (what `cdk deploy` makes);
`synthesized.full` turns every option on (see conftest.FullStack).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from cdk_helpers import (
    actions,
    by_sid,
    dashboard_body,
    filter_matches,
    logical_id,
    only,
    resources,
    statements,
)
from cdk_stacks import SUPPLIED_LAYER_ARN, SUPPLIED_ROLE_ARN, Synthesized

from zae_limiter import audit, schema, versioning
from zae_limiter.cdk.access import NAMESPACE_TAG
from zae_limiter.cdk.aggregator import (
    HELD_ALERTS_EVENT,
    METRIC_NAMESPACE,
    POWERTOOLS_RELEASE,
    SERVICE_NAME,
)
from zae_limiter.cdk.version_record import RESOURCE_TYPE
from zae_limiter.dynamo import keys
from zae_limiter.usage.aggregator import AggregatorSettings

TABLE = "AWS::DynamoDB::Table"
FUNCTION = "AWS::Lambda::Function"
ALARM = "AWS::CloudWatch::Alarm"
MANAGED_POLICY = "AWS::IAM::ManagedPolicy"


def table_ref(template: Any) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id(template, TABLE, "Table"), "Arn"]}


def index_arn(template: Any, name: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [table_ref(template), f"/index/{name}"]]}


def all_item_arns(template: Any) -> list[Any]:
    return [table_ref(template)] + [index_arn(template, i.name) for i in schema.INDEXES]


def aggregator(template: Any) -> dict[str, Any]:
    found: dict[str, dict[str, Any]] = resources(template, FUNCTION)
    return found[logical_id(template, FUNCTION, "AggregatorFunction")]


def role_policy(template: Any, role_part: str) -> dict[str, Any]:
    policies: dict[str, dict[str, Any]] = resources(template, "AWS::IAM::Policy")
    return policies[logical_id(template, "AWS::IAM::Policy", f"{role_part}RoleDefaultPolicy")]


# --- table -------------------------------------------------------------------------------------


def test_table_keys_and_indexes_come_from_the_schema(synthesized: Synthesized) -> None:
    table = only(synthesized.default, TABLE)
    props = table["Properties"]
    assert props["TableName"] == schema.DEFAULT_TABLE_NAME
    assert props["KeySchema"] == [
        {"AttributeName": schema.PARTITION_KEY, "KeyType": "HASH"},
        {"AttributeName": schema.SORT_KEY, "KeyType": "RANGE"},
    ]
    assert props["AttributeDefinitions"] == [
        {"AttributeName": name, "AttributeType": "S"} for name in schema.key_attribute_names()
    ]
    expected_indexes = []
    for index in schema.INDEXES:
        projection: dict[str, Any] = {"ProjectionType": index.projection}
        if index.non_key_attributes:
            projection["NonKeyAttributes"] = list(index.non_key_attributes)
        expected_indexes.append(
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition_key, "KeyType": "HASH"},
                    {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": projection,
            }
        )
    assert props["GlobalSecondaryIndexes"] == expected_indexes
    # The runtime's own CreateTable request describes the same table.
    request = schema.create_table_request(schema.DEFAULT_TABLE_NAME)
    assert props["GlobalSecondaryIndexes"] == request["GlobalSecondaryIndexes"]
    assert props["KeySchema"] == request["KeySchema"]


def test_table_stream_ttl_pitr_encryption_billing_and_retention(synthesized: Synthesized) -> None:
    table = only(synthesized.default, TABLE)
    props = table["Properties"]
    assert props["StreamSpecification"] == {"StreamViewType": schema.STREAM_VIEW_TYPE}
    assert props["TimeToLiveSpecification"] == {
        "AttributeName": schema.TTL_ATTRIBUTE,
        "Enabled": True,
    }
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert "ProvisionedThroughput" not in props
    # SSEEnabled false = encrypted with the AWS-owned key (DynamoDB's default).
    assert props["SSESpecification"] == {"SSEEnabled": False}
    assert props["DeletionProtectionEnabled"] is True  # by default: the table holds money
    assert table["DeletionPolicy"] == "Retain"
    assert table["UpdateReplacePolicy"] == "Retain"


def test_table_options(synthesized: Synthesized) -> None:
    template = synthesized.full
    table = only(template, TABLE)
    props = table["Properties"]
    assert props["TableName"] == "zl-full"
    assert "BillingMode" not in props  # CloudFormation's default: PROVISIONED
    throughput = {"ReadCapacityUnits": 7, "WriteCapacityUnits": 9}
    assert props["ProvisionedThroughput"] == throughput
    assert [i["ProvisionedThroughput"] for i in props["GlobalSecondaryIndexes"]] == [
        throughput
    ] * len(schema.INDEXES)
    key_id = logical_id(template, "AWS::KMS::Key", "TableKey")
    assert props["SSESpecification"] == {
        "KMSMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
        "SSEEnabled": True,
        "SSEType": "KMS",
    }
    assert props["DeletionProtectionEnabled"] is False  # opted out, as a stack to destroy does
    assert table["DeletionPolicy"] == "Delete"
    assert {"Key": "team", "Value": "payments"} in props["Tags"]


# --- aggregator and its event source ---------------------------------------------------------


def test_aggregator_function(synthesized: Synthesized) -> None:
    template = synthesized.default
    props = aggregator(template)["Properties"]
    assert props["Runtime"] == "python3.12"
    assert props["Handler"] == "handler.handler"
    assert props["Architectures"] == ["arm64"]
    assert props["MemorySize"] == 256
    assert props["Timeout"] == 60
    assert "TracingConfig" not in props
    # The tested Powertools release's layer, for this architecture, resolved at deploy time from
    # Powertools' SSM public parameter in the deployment's region.
    ((layer,),) = [props["Layers"]]
    parameter = template.to_json()["Parameters"][layer["Ref"]]
    assert parameter["Type"] == "AWS::SSM::Parameter::Value<String>"
    assert parameter["Default"] == (
        f"/aws/service/powertools/python/arm64/python3.12/{POWERTOOLS_RELEASE}"
    )
    table_id = logical_id(template, TABLE, "Table")
    assert props["Environment"]["Variables"] == {
        "TABLE_NAME": {"Ref": table_id},
        "SNAPSHOT_WINDOWS": "hourly,daily",
        "USAGE_RETENTION_DAYS": "90",
        "POWERTOOLS_SERVICE_NAME": "zae-limiter-aggregator",
        "POWERTOOLS_METRICS_NAMESPACE": "ZaeLimiter",
    }
    log_group_id = logical_id(template, "AWS::Logs::LogGroup", "AggregatorLogGroup")
    assert props["LoggingConfig"] == {"LogFormat": "JSON", "LogGroup": {"Ref": log_group_id}}
    log_group = resources(template, "AWS::Logs::LogGroup")[log_group_id]
    assert log_group["Properties"]["RetentionInDays"] == 30


def test_aggregator_options(synthesized: Synthesized) -> None:
    template = synthesized.full
    props = aggregator(template)["Properties"]
    assert props["MemorySize"] == 512
    assert props["Timeout"] == 120
    assert props["TracingConfig"] == {"Mode": "Active"}
    variables = props["Environment"]["Variables"]
    assert variables["SNAPSHOT_WINDOWS"] == "hourly,daily,monthly"
    assert variables["USAGE_RETENTION_DAYS"] == "30"
    bucket_id = logical_id(template, "AWS::S3::Bucket", "AuditArchive")
    assert variables["ARCHIVE_BUCKET"] == {"Ref": bucket_id}
    groups = resources(template, "AWS::Logs::LogGroup")
    assert {g["Properties"]["RetentionInDays"] for g in groups.values()} == {14}


def test_aggregator_reads_the_settings_the_construct_sets(synthesized: Synthesized) -> None:
    """The environment, metric namespace and service name match what the aggregator expects."""
    for template, windows, days in (
        (synthesized.default, ("hourly", "daily"), 90),
        (synthesized.full, ("hourly", "daily", "monthly"), 30),
    ):
        variables = aggregator(template)["Properties"]["Environment"]["Variables"]
        env = {k: v for k, v in variables.items() if isinstance(v, str)}
        settings = AggregatorSettings.from_env(env)
        assert (settings.windows, settings.default_retention_days) == (windows, days)
    handler = importlib.import_module("zae_limiter.lambdas.aggregator.handler")
    assert (handler.METRIC_NAMESPACE, handler.SERVICE) == (METRIC_NAMESPACE, SERVICE_NAME)


def test_aggregator_role_is_least_privilege(synthesized: Synthesized) -> None:
    template = synthesized.default
    role_id = logical_id(template, "AWS::IAM::Role", "AggregatorRole")
    role = resources(template, "AWS::IAM::Role")[role_id]
    assert "ManagedPolicyArns" not in role["Properties"]  # no AWSLambdaBasicExecutionRole
    found = {
        json.dumps(s["Resource"], sort_keys=True): actions(s)
        for s in statements(role_policy(template, "Aggregator"))
    }
    table_id = logical_id(template, TABLE, "Table")
    queue_id = logical_id(template, "AWS::SQS::Queue", "DeadLetterQueue")
    log_group_id = logical_id(template, "AWS::Logs::LogGroup", "AggregatorLogGroup")

    def key(resource: Any) -> str:
        return json.dumps(resource, sort_keys=True)

    on_table = {
        s["Sid"]: (actions(s), s["Condition"])
        for s in statements(role_policy(template, "Aggregator"))
        if s["Resource"] == {"Fn::GetAtt": [table_id, "Arn"]}
    }
    assert on_table == {
        "ReadReservedItems": (
            ["dynamodb:GetItem"],
            {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["_#VERSION", "_#NSID"]}},
        ),
        "CheckDeletedEntities": (
            ["dynamodb:ConditionCheckItem", "dynamodb:GetItem"],
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["??????????#UDEL#*"]}},
        ),
        "WriteSnapshotsAndMarkers": (
            ["dynamodb:PutItem", "dynamodb:UpdateItem"],
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["??????????#U#*", "_#AGG#*"]}},
        ),
        "WriteAlerts": (
            ["dynamodb:PutItem", "dynamodb:UpdateItem"],
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["??????????#AL#*"]}},
        ),
        "HoldCrossings": (
            ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"],
            {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["_#ALH"]}},
        ),
        "ReadBucketsOfHeldCrossings": (
            ["dynamodb:GetItem"],
            {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["??????????#B#*"]}},
        ),
    }
    del found[key({"Fn::GetAtt": [table_id, "Arn"]})]
    assert found == {
        key({"Fn::GetAtt": [log_group_id, "Arn"]}): ["logs:CreateLogStream", "logs:PutLogEvents"],
        key({"Fn::GetAtt": [table_id, "StreamArn"]}): [
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
        ],
        key("*"): ["dynamodb:ListStreams"],
        key({"Fn::GetAtt": [queue_id, "Arn"]}): [
            "sqs:GetQueueAttributes",
            "sqs:GetQueueUrl",
            "sqs:SendMessage",
        ],
    }


def test_held_alerts_are_swept_every_minute_on_every_table(synthesized: Synthesized) -> None:
    """Crossings held until no refund can undo them are confirmed even when no stream batch
    comes: a schedule invokes the aggregator with `HELD_ALERTS_EVENT` (single-Region tables
    have no other rule)."""
    template = synthesized.default
    rule = only(template, "AWS::Events::Rule")["Properties"]
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    assert json.loads(rule["Targets"][0]["Input"]) == HELD_ALERTS_EVENT
    function_id = logical_id(template, FUNCTION, "AggregatorFunction")
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [function_id, "Arn"]}


def test_aggregator_role_options(synthesized: Synthesized) -> None:
    template = synthesized.full
    sids = by_sid_where_present(role_policy(template, "Aggregator"))
    assert actions(sids["TableKey"]) == ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]
    assert actions(sids["AuditArchive"]) == ["s3:PutObject"]
    bucket_id = logical_id(template, "AWS::S3::Bucket", "AuditArchive")
    assert sids["AuditArchive"]["Resource"] == {
        "Fn::Join": ["", [{"Fn::GetAtt": [bucket_id, "Arn"]}, "/audit/*"]]
    }
    xray = [s for s in statements(role_policy(template, "Aggregator")) if "xray" in str(s)]
    assert xray, "tracing adds X-Ray permissions"
    role = resources(template, "AWS::IAM::Role")[
        logical_id(template, "AWS::IAM::Role", "AggregatorRole")
    ]
    assert role["Properties"]["RoleName"] == "zl-full-aggregator-role"


def by_sid_where_present(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["Sid"]: s for s in statements(policy) if "Sid" in s}


def test_event_source_mapping(synthesized: Synthesized) -> None:
    template = synthesized.default
    mapping = only(template, "AWS::Lambda::EventSourceMapping")
    esm = mapping["Properties"]
    table_id = logical_id(template, TABLE, "Table")
    queue_id = logical_id(template, "AWS::SQS::Queue", "DeadLetterQueue")
    # The stream starts only after the version record (which the aggregator reads) is written.
    assert logical_id(template, RESOURCE_TYPE, "VersionRecord") in mapping["DependsOn"]
    assert esm["EventSourceArn"] == {"Fn::GetAtt": [table_id, "StreamArn"]}
    assert esm["FunctionName"] == {"Ref": logical_id(template, FUNCTION, "AggregatorFunction")}
    assert esm["StartingPosition"] == "TRIM_HORIZON"
    assert esm["BatchSize"] == 100
    assert esm["MaximumBatchingWindowInSeconds"] == 5
    assert esm["BisectBatchOnFunctionError"] is True
    assert esm["MaximumRetryAttempts"] == 5
    assert esm["MaximumRecordAgeInSeconds"] == 3600
    assert esm["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert esm["DestinationConfig"] == {
        "OnFailure": {"Destination": {"Fn::GetAtt": [queue_id, "Arn"]}}
    }
    patterns = [json.loads(f["Pattern"]) for f in esm["FilterCriteria"]["Filters"]]
    assert patterns == [
        {
            "eventName": ["INSERT", "MODIFY"],
            "dynamodb": {"Keys": {schema.SORT_KEY: {"S": [keys.BUCKET]}}},
        }
    ]
    full = only(synthesized.full, "AWS::Lambda::EventSourceMapping")["Properties"]
    assert full["BatchSize"] == 250
    assert full["MaximumBatchingWindowInSeconds"] == 10
    assert len(full["FilterCriteria"]["Filters"]) == 2


def _record(
    event_name: str, item: dict[str, Any], old_image: dict[str, Any] | None
) -> dict[str, Any]:
    """A stream record as Lambda's filter sees it (DynamoDB JSON, strings and numbers only)."""

    def wire(values: dict[str, Any]) -> dict[str, Any]:
        return {
            k: {"N": str(v)} if isinstance(v, int) else {"S": str(v)} for k, v in values.items()
        }

    body: dict[str, Any] = {
        "Keys": wire({k: item[k] for k in (schema.PARTITION_KEY, schema.SORT_KEY)})
    }
    if event_name != "REMOVE":
        body["NewImage"] = wire(item)
    if old_image is not None:
        body["OldImage"] = wire(old_image)
    return {"eventName": event_name, "dynamodb": body}


def test_stream_filters_select_bucket_writes_and_expiring_audit_events(
    synthesized: Synthesized,
) -> None:
    def patterns(template: Any) -> list[Any]:
        esm = only(template, "AWS::Lambda::EventSourceMapping")["Properties"]
        return [json.loads(f["Pattern"]) for f in esm["FilterCriteria"]["Filters"]]

    def delivered(template: Any, record: dict[str, Any]) -> bool:
        return any(filter_matches(p, record) for p in patterns(template))

    ns = "0a1b2c3d4e"
    now_ms = 1_800_000_000_000
    bucket = {**keys.bucket(ns, "user-1", "api", 3), "tokens": 5}
    audit_item = audit.event_item(
        ns,
        action="limits_set",
        entity_id="user-1",
        principal=None,
        resource="api",
        details={},
        now_ms=now_ms,
    )
    config = {**keys.entity_config(ns, "user-1", "api"), "v": 1}
    version = {**keys.version_record(), "schema_version": "1.0.0"}
    marker = {**keys.aggregation_marker("e1"), "seq": "1", "ttl": now_ms // 1000}
    snapshot = {
        **keys.usage_snapshot(ns, "user-1", "api", "hourly", "2027-01-15T08:00:00Z"),
        "total_events": 3,
        "ttl": now_ms // 1000,
    }

    for template in (synthesized.default, synthesized.full):
        assert delivered(template, _record("INSERT", bucket, None))
        assert delivered(template, _record("MODIFY", bucket, bucket))
        assert not delivered(template, _record("REMOVE", bucket, {**bucket, "ttl": 1}))
        assert not delivered(template, _record("MODIFY", config, config))
        assert not delivered(template, _record("INSERT", version, None))
        assert not delivered(template, _record("INSERT", audit_item, None))
        assert not delivered(template, _record("INSERT", marker, None))
        assert not delivered(template, _record("INSERT", snapshot, None))
        # Expiring markers and snapshots never reach the aggregator, archive or not.
        assert not delivered(template, _record("REMOVE", marker, marker))
        assert not delivered(template, _record("REMOVE", snapshot, snapshot))
    # Archiving on: expiring audit events (of any namespace) reach the aggregator.
    assert delivered(synthesized.full, _record("REMOVE", audit_item, audit_item))
    assert not delivered(synthesized.full, _record("REMOVE", config, config))
    assert not delivered(synthesized.default, _record("REMOVE", audit_item, audit_item))


def test_dead_letter_queue(synthesized: Synthesized) -> None:
    template = synthesized.default
    queue = only(template, "AWS::SQS::Queue")["Properties"]
    assert queue["MessageRetentionPeriod"] == 14 * 24 * 3600
    assert queue["SqsManagedSseEnabled"] is True
    policy = only(template, "AWS::SQS::QueuePolicy")["Properties"]
    denies = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert denies and denies[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


# --- alarms ----------------------------------------------------------------------------------


def alarms_by_name(template: Any) -> dict[str, dict[str, Any]]:
    return {
        a["Properties"]["AlarmName"]: a["Properties"] for a in resources(template, ALARM).values()
    }


def test_every_alarm(synthesized: Synthesized) -> None:
    alarms = alarms_by_name(synthesized.default)
    prefix = schema.DEFAULT_TABLE_NAME
    assert sorted(alarms) == sorted(
        f"{prefix}-{name}"
        for name in (
            "aggregator-dlq",
            "aggregator-error-rate",
            "aggregator-duration",
            "aggregator-iterator-age",
            "aggregator-failed-batches",
            "table-read-throttles",
            "table-write-throttles",
        )
    )
    for alarm in alarms.values():
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["TreatMissingData"] == "notBreaching"
        assert "AlarmActions" not in alarm  # no topic by default

    dlq = alarms[f"{prefix}-aggregator-dlq"]
    assert (dlq["Namespace"], dlq["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert (dlq["Statistic"], dlq["Threshold"], dlq["Period"]) == ("Maximum", 0, 60)

    rate = alarms[f"{prefix}-aggregator-error-rate"]
    assert rate["Threshold"] == 1
    # A rate, not a count: errors / invocations of the same 5 minutes, the only returned series.
    (expression,) = [m for m in rate["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "IF(invocations > 0, 100 * errors / invocations, 0)"
    assert [m["Id"] for m in rate["Metrics"] if m["ReturnData"]] == [expression["Id"]]
    names = {
        m["Id"]: (
            m["MetricStat"]["Metric"]["MetricName"],
            m["MetricStat"]["Stat"],
            m["MetricStat"]["Period"],
        )
        for m in rate["Metrics"]
        if "MetricStat" in m
    }
    assert names == {"errors": ("Errors", "Sum", 300), "invocations": ("Invocations", "Sum", 300)}

    duration = alarms[f"{prefix}-aggregator-duration"]
    assert (duration["MetricName"], duration["Statistic"]) == ("Duration", "Maximum")
    assert duration["Threshold"] == 0.8 * 60_000

    age = alarms[f"{prefix}-aggregator-iterator-age"]
    assert (age["MetricName"], age["Statistic"], age["Threshold"]) == (
        "IteratorAge",
        "Maximum",
        60_000,
    )
    assert (age["EvaluationPeriods"], age["DatapointsToAlarm"], age["Period"]) == (5, 3, 60)

    failed = alarms[f"{prefix}-aggregator-failed-batches"]
    assert (failed["Namespace"], failed["MetricName"], failed["Statistic"]) == (
        "ZaeLimiter",
        "FailedBatches",
        "Sum",
    )
    # This deployment's series only: the aggregator puts the table name on every metric.
    assert sorted(failed["Dimensions"], key=lambda d: d["Name"]) == [
        {"Name": "deployment", "Value": prefix},
        {"Name": "service", "Value": SERVICE_NAME},
    ]

    for kind in ("read", "write"):
        throttle = alarms[f"{prefix}-table-{kind}-throttles"]
        assert throttle["Threshold"] == 0
        stats = [m["MetricStat"] for m in throttle["Metrics"] if "MetricStat" in m]
        metric_name = f"{kind.capitalize()}ThrottleEvents"
        assert {s["Metric"]["MetricName"] for s in stats} == {metric_name}
        indexes = sorted(
            d["Value"]
            for s in stats
            for d in s["Metric"]["Dimensions"]
            if d["Name"] == "GlobalSecondaryIndexName"
        )
        assert indexes == sorted(i.name for i in schema.INDEXES)  # table + every index
        assert len(stats) == len(schema.INDEXES) + 1
        (sum_expression,) = [m["Expression"] for m in throttle["Metrics"] if "Expression" in m]
        assert sum_expression.startswith("SUM([")


def test_alarm_options(synthesized: Synthesized) -> None:
    template = synthesized.full
    topic = {"Ref": logical_id(template, "AWS::SNS::Topic", "AlarmTopic")}
    alarms = alarms_by_name(template)
    assert len(alarms) == 7
    for alarm in alarms.values():
        assert alarm["AlarmActions"] == [topic]
        assert alarm["OKActions"] == [topic]
    assert alarms["zl-full-aggregator-duration"]["Threshold"] == 0.5 * 120_000


# --- dashboard -------------------------------------------------------------------------------


def test_dashboard(synthesized: Synthesized) -> None:
    body = dashboard_body(synthesized.default)
    widgets = body["widgets"]
    titles = [w["properties"].get("title") for w in widgets]
    for title in (
        "Consumption per resource and limit",
        "Admissions",
        "Overdrawn writes (soft limits)",
        "Aggregator invocations and errors",
        "Aggregator duration",
        "Stream lag and DLQ depth",
        "Table consumed capacity",
        "Table throttles",
        "Table latency (average, ms)",
        "Alarms",
    ):
        assert title in titles, title
    text = json.dumps(body)
    deployment = schema.DEFAULT_TABLE_NAME
    for metric in ("Consumed", "Admissions", "Overdrawn", "ProcessingLagMs"):
        search = (
            f'SEARCH(\'Namespace=\\"ZaeLimiter\\" MetricName=\\"{metric}\\" '
            f'deployment=\\"{deployment}\\"\''
        )
        assert search in text, metric
    for metric in (
        "Invocations",
        "Errors",
        "Duration",
        "IteratorAge",
        "ApproximateNumberOfMessagesVisible",
        "ConsumedReadCapacityUnits",
        "ConsumedWriteCapacityUnits",
        "ReadThrottleEvents",
        "WriteThrottleEvents",
        "SuccessfulRequestLatency",
    ):
        assert f'"{metric}"' in text, metric
    (alarm_widget,) = [w for w in widgets if w["properties"].get("title") == "Alarms"]
    assert len(alarm_widget["properties"]["alarms"]) == 7
    dashboard = only(synthesized.default, "AWS::CloudWatch::Dashboard")["Properties"]
    assert dashboard["DashboardName"] == {
        "Fn::Join": ["-", [f"{schema.DEFAULT_TABLE_NAME}-usage", {"Ref": "AWS::Region"}]]
    }


# --- managed policies and roles --------------------------------------------------------------


def policies_by_name(template: Any, construct_part: str) -> dict[str, Any]:
    found: dict[str, dict[str, Any]] = resources(template, MANAGED_POLICY)
    return found[logical_id(template, MANAGED_POLICY, construct_part)]


def test_app_policy_exact_actions(synthesized: Synthesized) -> None:
    """The acquire path's reads, by key on the table only (no index): config, entity records,
    the resources with entity config, buckets; the registry; bucket writes."""
    template = synthesized.default
    sids = by_sid(policies_by_name(template, "AppPolicy"))
    assert sorted(sids) == ["Read", "Registry", "WriteBuckets"]
    assert actions(sids["Read"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:GetItem",
        "dynamodb:Query",
    ]
    assert sids["Read"]["Resource"] == table_ref(template)
    ns = "??????????"
    assert sids["Read"]["Condition"] == {
        "ForAllValues:StringLike": {
            "dynamodb:LeadingKeys": [
                f"{ns}#S",
                f"{ns}#R#*",
                f"{ns}#E#*",
                f"{ns}#CFGRES",
                f"{ns}#B#*",
            ]
        }
    }
    assert sids["Registry"]["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["_#VERSION", "_#NS", "_#NSID"]}
    }
    assert actions(sids["WriteBuckets"]) == ["dynamodb:PutItem", "dynamodb:UpdateItem"]
    assert sids["WriteBuckets"]["Resource"] == table_ref(template)
    assert sids["WriteBuckets"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{ns}#B#*"]}
    }


def test_usage_and_audit_policies_exact_actions(synthesized: Synthesized) -> None:
    template = synthesized.default
    ns = "??????????"
    usage = by_sid(policies_by_name(template, "UsagePolicy"))
    assert sorted(usage) == ["ReadUsage", "Registry", "UsageByResource"]
    assert usage["ReadUsage"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{ns}#U#*"]}
    }
    assert actions(usage["UsageByResource"]) == ["dynamodb:Query"]
    assert usage["UsageByResource"]["Resource"] == index_arn(template, "GSI2")
    audit = by_sid(policies_by_name(template, "AuditPolicy"))
    assert sorted(audit) == ["AuditLog", "ReadAudit", "Registry"]
    assert actions(audit["ReadAudit"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:GetItem",
        "dynamodb:Query",
    ]
    assert audit["ReadAudit"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{ns}#A#*"]}
    }
    assert audit["AuditLog"]["Resource"] == index_arn(template, "GSI1")
    assert audit["AuditLog"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{ns}#AL"]}
    }


def test_admin_policy_exact_actions(synthesized: Synthesized) -> None:
    template = synthesized.default
    sids = by_sid(policies_by_name(template, "AdminPolicy"))
    assert sorted(sids) == ["AggregatorCode", "DeadLetters", "Items", "Stream"]
    assert actions(sids["Items"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:DeleteItem",
        "dynamodb:DescribeTable",
        "dynamodb:DescribeTimeToLive",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
    ]
    assert sids["Items"]["Resource"] == all_item_arns(template)
    assert actions(sids["Stream"]) == [
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
    ]
    assert actions(sids["DeadLetters"]) == [
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
    ]
    assert actions(sids["AggregatorCode"]) == [
        "lambda:GetFunction",
        "lambda:GetFunctionConfiguration",
        "lambda:UpdateFunctionCode",
    ]
    function_id = logical_id(template, FUNCTION, "AggregatorFunction")
    assert sids["AggregatorCode"]["Resource"] == {"Fn::GetAtt": [function_id, "Arn"]}


def test_read_only_policy_exact_actions(synthesized: Synthesized) -> None:
    template = synthesized.default
    sids = by_sid(policies_by_name(template, "ReadonlyPolicy"))
    assert sorted(sids) == ["Read"]
    assert actions(sids["Read"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:DescribeTable",
        "dynamodb:DescribeTimeToLive",
        "dynamodb:GetItem",
        "dynamodb:Query",
        "dynamodb:Scan",
    ]
    assert sids["Read"]["Resource"] == all_item_arns(template)


def test_no_policy_uses_an_index_wildcard(synthesized: Synthesized) -> None:
    for template in (synthesized.default, synthesized.full):
        text = json.dumps(template.to_json())
        assert "/index/*" not in text


def test_namespace_scoped_policies(synthesized: Synthesized) -> None:
    template = synthesized.full
    namespace = "${aws:PrincipalTag/" + NAMESPACE_TAG + "}"
    scoped = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [namespace, f"{namespace}#*"]}}
    registry = {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["_#VERSION", "_#NS", "_#NSID"]}
    }

    app = by_sid(policies_by_name(template, "AppNamespacePolicy"))
    assert sorted(app) == ["Read", "Registry", "TableKey", "WriteBuckets"]
    assert app["Read"]["Condition"] == {
        "ForAllValues:StringLike": {
            "dynamodb:LeadingKeys": [
                f"{namespace}#S",
                f"{namespace}#R#*",
                f"{namespace}#E#*",
                f"{namespace}#CFGRES",
                f"{namespace}#B#*",
            ]
        }
    }
    assert app["WriteBuckets"]["Condition"] == {
        "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{namespace}#B#*"]}
    }
    assert app["Registry"]["Condition"] == registry
    assert actions(app["Registry"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:DescribeTable",  # is the table multi-Region? (docs/multi-region.md)
        "dynamodb:GetItem",
        "dynamodb:Query",
    ]

    admin = by_sid(policies_by_name(template, "AdminNamespacePolicy"))
    assert sorted(admin) == ["Items", "Registry", "TableKey", "VersionRecord"]
    assert admin["Items"]["Condition"] == scoped
    assert "dynamodb:Scan" not in actions(admin["Items"])  # Scan has no key to check
    assert actions(admin["VersionRecord"]) == ["dynamodb:UpdateItem"]
    assert admin["VersionRecord"]["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["_#VERSION"]}
    }

    read_only = by_sid(policies_by_name(template, "ReadonlyNamespacePolicy"))
    assert sorted(read_only) == ["Read", "Registry", "TableKey"]
    assert actions(read_only["Read"]) == [
        "dynamodb:BatchGetItem",
        "dynamodb:DescribeTable",
        "dynamodb:DescribeTimeToLive",
        "dynamodb:GetItem",
        "dynamodb:Query",
    ]
    assert actions(read_only["TableKey"]) == ["kms:Decrypt", "kms:DescribeKey"]


def test_policy_and_role_names_and_boundary(synthesized: Synthesized) -> None:
    template = synthesized.full
    names = sorted(
        p["Properties"]["ManagedPolicyName"]
        for lid, p in resources(template, MANAGED_POLICY).items()
        if "Boundary" not in lid
    )
    assert names == sorted(
        f"zl-full-{n}"
        for n in (
            "app",
            "admin",
            "readonly",
            "usage",
            "audit",
            "alerts",
            "app-namespace",
            "admin-namespace",
            "readonly-namespace",
            "usage-namespace",
            "audit-namespace",
            "alerts-namespace",
        )
    )
    roles = resources(template, "AWS::IAM::Role")
    boundary = {"Ref": logical_id(template, MANAGED_POLICY, "Boundary")}
    assert {r["Properties"]["RoleName"] for r in roles.values()} == {
        f"zl-full-{n}-role" for n in ("app", "admin", "readonly", "aggregator", "version-record")
    }
    for role in roles.values():
        assert role["Properties"]["PermissionsBoundary"] == boundary
    app_role = roles[logical_id(template, "AWS::IAM::Role", "AppRole")]["Properties"]
    app_policy = logical_id(template, MANAGED_POLICY, "AccessAppPolicy")
    assert app_role["ManagedPolicyArns"] == [{"Ref": app_policy}]
    assert json.dumps(app_role["AssumeRolePolicyDocument"]).count(":root") == 1
    # Defaults: no roles besides the two Lambda execution roles.
    default_roles = resources(synthesized.default, "AWS::IAM::Role")
    assert len(default_roles) == 2


# --- version record custom resource ----------------------------------------------------------


def test_version_record_custom_resource(synthesized: Synthesized) -> None:
    template = synthesized.default
    resource = only(template, RESOURCE_TYPE)["Properties"]
    function_id = logical_id(template, FUNCTION, "VersionRecordFunction")
    assert resource == {
        "ServiceToken": {"Fn::GetAtt": [function_id, "Arn"]},
        "TableName": {"Ref": logical_id(template, TABLE, "Table")},
        "AggregatorVersion": versioning.LIBRARY_VERSION,
        "SchemaVersion": schema.SCHEMA_VERSION,
        "AggregatorFunction": {"Ref": logical_id(template, FUNCTION, "AggregatorFunction")},
        "DeadLetterQueueUrl": {"Ref": logical_id(template, "AWS::SQS::Queue", "DeadLetterQueue")},
        "AllowAggregatorDowngrade": False,
        "AuditRetentionDays": 90,
        "UsageRetentionDays": 90,
    }
    function = resources(template, FUNCTION)[function_id]["Properties"]
    assert (function["Runtime"], function["Handler"]) == ("python3.12", "handler.handler")
    dynamo = [s for s in statements(role_policy(template, "VersionRecord")) if "dynamodb" in str(s)]
    assert dynamo == [
        {
            "Sid": "ReservedItems",
            "Effect": "Allow",
            "Action": ["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"],
            "Resource": table_ref(template),
            "Condition": {
                "ForAllValues:StringEquals": {
                    "dynamodb:LeadingKeys": ["_#VERSION", "_#NS", "_#NSID"]
                }
            },
        }
    ]
    full = only(synthesized.full, RESOURCE_TYPE)["Properties"]
    assert full["AllowAggregatorDowngrade"] is True
    assert (full["AuditRetentionDays"], full["UsageRetentionDays"]) == (400, 30)


# --- archive bucket and outputs --------------------------------------------------------------


def test_audit_archive_bucket(synthesized: Synthesized) -> None:
    template = synthesized.full
    bucket = only(template, "AWS::S3::Bucket")
    props = bucket["Properties"]
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props["LifecycleConfiguration"]["Rules"] == [
        {
            "Id": "GlacierInstantRetrieval",
            "Status": "Enabled",
            "Transitions": [{"StorageClass": "GLACIER_IR", "TransitionInDays": 45}],
        }
    ]
    policy = only(template, "AWS::S3::BucketPolicy")["Properties"]["PolicyDocument"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Statement"]
    )
    assert resources(synthesized.default, "AWS::S3::Bucket") == {}


def test_outputs(synthesized: Synthesized) -> None:
    def names(template: Any) -> set[str]:
        return set(template.find_outputs("*"))

    def has(template: Any, name: str) -> bool:
        return any(
            o.startswith(f"ZaeLimiter{name}") or o.startswith(f"Limiter{name}")
            for o in names(template)
        )

    for name in (
        "TableName",
        "TableArn",
        "StreamArn",
        "AggregatorFunctionName",
        "AggregatorFunctionArn",
        "DeadLetterQueueUrl",
        "DashboardName",
        "AppPolicyArn",
        "AdminPolicyArn",
        "ReadonlyPolicyArn",
        "UsagePolicyArn",
        "AuditPolicyArn",
        "AlertsPolicyArn",
    ):
        assert has(synthesized.default, name), name
        assert has(synthesized.full, name), name
    assert not has(synthesized.default, "AuditArchiveBucket")
    for name in ("AuditArchiveBucket", "AppNamespacePolicyArn", "AppRoleArn", "AdminRoleArn"):
        assert has(synthesized.full, name), name
    table_id = logical_id(synthesized.default, TABLE, "Table")
    outputs = synthesized.default.find_outputs("*")
    (table_output,) = [v for k, v in outputs.items() if k.startswith("ZaeLimiterTableName")]
    assert table_output["Value"] == {"Ref": table_id}


def test_optional_parts_off_with_a_supplied_role_and_layer(synthesized: Synthesized) -> None:
    template = synthesized.minimal
    for resource_type in (ALARM, "AWS::CloudWatch::Dashboard", MANAGED_POLICY):
        assert resources(template, resource_type) == {}, resource_type
    props = aggregator(template)["Properties"]
    assert props["Role"] == SUPPLIED_ROLE_ARN
    assert props["Layers"] == [SUPPLIED_LAYER_ARN]
    # Only the version record's own role is created; the supplied role is never modified.
    (role_id,) = resources(template, "AWS::IAM::Role")
    assert "VersionRecord" in role_id
    assert SUPPLIED_ROLE_ARN not in json.dumps(resources(template, "AWS::IAM::Policy"))
    assert only(template, RESOURCE_TYPE)["Properties"]["TableName"] == {
        "Ref": logical_id(template, TABLE, "Table")
    }
    outputs = set(template.find_outputs("*"))
    assert not [o for o in outputs if "Dashboard" in o or "PolicyArn" in o]
