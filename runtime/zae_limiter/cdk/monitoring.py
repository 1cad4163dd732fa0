"""Alarms and the CloudWatch usage dashboard of a `ZaeLimiter` deployment."""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import Aws, Duration, Fn
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from zae_limiter import schema

from .aggregator import METRIC_NAMESPACE, SERVICE_NAME, AggregatorFunction
from .props import ZaeLimiterProps

FIVE_MINUTES = Duration.minutes(5)
ONE_MINUTE = Duration.minutes(1)
#: Alarm threshold of the aggregator's error rate, in percent of invocations.
ERROR_RATE_THRESHOLD_PCT = 1
#: Alarm threshold of the stream iterator age, in milliseconds.
ITERATOR_AGE_THRESHOLD_MS = 60_000
#: The aggregator's EMF metrics (namespace `ZaeLimiter`; dimensions namespace/resource/limit, and
#: on every one `deployment`, the table name, so deployments sharing a region stay apart).
USAGE_METRICS = ("Consumed", "Admissions", "Overdrawn")
LAG_METRIC = "ProcessingLagMs"
FAILED_BATCHES_METRIC = "FailedBatches"
DEPLOYMENT_DIMENSION = "deployment"
#: Table operations whose latency the dashboard shows.
LATENCY_OPERATIONS = ("GetItem", "UpdateItem", "TransactWriteItems", "Query")


def error_rate(aggregator: AggregatorFunction) -> cw.MathExpression:
    """Aggregator errors as a percentage of invocations over 5 minutes (0 when idle)."""
    function = aggregator.function
    return cw.MathExpression(
        expression="IF(invocations > 0, 100 * errors / invocations, 0)",
        using_metrics={
            "errors": function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
            "invocations": function.metric_invocations(period=FIVE_MINUTES, statistic="Sum"),
        },
        period=FIVE_MINUTES,
        label="Error rate (%)",
    )


def throttle_events(table: dynamodb.ITable, kind: str) -> cw.MathExpression:
    """`<kind>ThrottleEvents` of the table and every index, summed (kind: Read or Write)."""
    metric_name = f"{kind}ThrottleEvents"
    prefix = kind.lower()  # ids must differ between the read and write sums on one graph
    metrics = {
        f"{prefix}_table": table.metric(metric_name, period=FIVE_MINUTES, statistic="Sum"),
    }
    for position, index in enumerate(schema.INDEXES):
        metrics[f"{prefix}_index{position}"] = table.metric(
            metric_name,
            period=FIVE_MINUTES,
            statistic="Sum",
            dimensions_map={
                "TableName": table.table_name,
                "GlobalSecondaryIndexName": index.name,
            },
        )
    return cw.MathExpression(
        expression=f"SUM([{', '.join(metrics)}])",
        using_metrics=metrics,
        period=FIVE_MINUTES,
        label=f"{kind} throttle events (table and indexes)",
    )


def usage_search(deployment: str, metric_name: str, statistic: str) -> cw.MathExpression:
    """Every series of one aggregator metric of this deployment, whatever its other dimensions."""
    seconds = int(FIVE_MINUTES.to_seconds())
    return cw.MathExpression(
        expression=(
            f'SEARCH(\'Namespace="{METRIC_NAMESPACE}" MetricName="{metric_name}" '
            f'{DEPLOYMENT_DIMENSION}="{deployment}"\', '
            f"'{statistic}', {seconds})"
        ),
        using_metrics={},
        period=FIVE_MINUTES,
        label=metric_name,
    )


def build_alarms(
    scope: Construct,
    *,
    aggregator: AggregatorFunction,
    table: dynamodb.ITable,
    props: ZaeLimiterProps,
) -> list[cw.Alarm]:
    """DLQ, error rate, duration, iterator age, read and write throttles; actions to the topic."""
    function = aggregator.function
    prefix = props.table_name
    greater = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
    not_breaching = cw.TreatMissingData.NOT_BREACHING
    timeout_ms = props.aggregator_timeout_seconds * 1000
    alarms = [
        cw.Alarm(
            scope,
            "DeadLetterQueueAlarm",
            alarm_name=f"{prefix}-aggregator-dlq",
            alarm_description=(
                "Stream records the aggregator could not process were sent to its DLQ; usage "
                "snapshots are missing them. Fix the cause, then `zae-limiter usage redrive` "
                "within 24 h."
            ),
            metric=aggregator.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=ONE_MINUTE, statistic="Maximum"
            ),
            threshold=0,
            comparison_operator=greater,
            evaluation_periods=1,
            treat_missing_data=not_breaching,
        ),
        cw.Alarm(
            scope,
            "ErrorRateAlarm",
            alarm_name=f"{prefix}-aggregator-error-rate",
            alarm_description=(
                f"More than {ERROR_RATE_THRESHOLD_PCT} % of aggregator invocations failed over "
                "5 minutes. Check the aggregator's logs."
            ),
            metric=error_rate(aggregator),
            threshold=ERROR_RATE_THRESHOLD_PCT,
            comparison_operator=greater,
            evaluation_periods=1,
            treat_missing_data=not_breaching,
        ),
        cw.Alarm(
            scope,
            "DurationAlarm",
            alarm_name=f"{prefix}-aggregator-duration",
            alarm_description=(
                f"An aggregator invocation ran longer than {props.duration_alarm_threshold_pct} % "
                f"of its {props.aggregator_timeout_seconds} s timeout."
            ),
            metric=function.metric_duration(period=FIVE_MINUTES, statistic="Maximum"),
            threshold=timeout_ms * props.duration_alarm_threshold_pct / 100,
            comparison_operator=greater,
            evaluation_periods=1,
            treat_missing_data=not_breaching,
        ),
        cw.Alarm(
            scope,
            "IteratorAgeAlarm",
            alarm_name=f"{prefix}-aggregator-iterator-age",
            alarm_description=(
                "The aggregator is more than 60 s behind the table's stream (3 of the last 5 "
                "minutes); usage snapshots are late."
            ),
            metric=function.metric("IteratorAge", period=ONE_MINUTE, statistic="Maximum"),
            threshold=ITERATOR_AGE_THRESHOLD_MS,
            comparison_operator=greater,
            evaluation_periods=5,
            datapoints_to_alarm=3,
            treat_missing_data=not_breaching,
        ),
    ]
    alarms.append(
        cw.Alarm(
            scope,
            "FailedBatchesAlarm",
            alarm_name=f"{prefix}-aggregator-failed-batches",
            alarm_description=(
                "The aggregator failed whole batches (for example a table schema it cannot "
                "read); they are retried until they reach the DLQ. Check the aggregator's logs."
            ),
            metric=cw.Metric(
                namespace=METRIC_NAMESPACE,
                metric_name=FAILED_BATCHES_METRIC,
                dimensions_map={DEPLOYMENT_DIMENSION: props.table_name, "service": SERVICE_NAME},
                period=FIVE_MINUTES,
                statistic="Sum",
            ),
            threshold=0,
            comparison_operator=greater,
            evaluation_periods=1,
            treat_missing_data=not_breaching,
        )
    )
    for kind in ("Read", "Write"):
        alarms.append(
            cw.Alarm(
                scope,
                f"{kind}ThrottleAlarm",
                alarm_name=f"{prefix}-table-{kind.lower()}-throttles",
                alarm_description=(
                    f"DynamoDB throttled {kind.lower()}s on the table or its indexes in the last "
                    "5 minutes."
                ),
                metric=throttle_events(table, kind),
                threshold=0,
                comparison_operator=greater,
                evaluation_periods=1,
                treat_missing_data=not_breaching,
            )
        )
    if props.alarm_topic is not None:
        action = cw_actions.SnsAction(props.alarm_topic)
        for alarm in alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
    return alarms


def dashboard_name(table_name: str) -> str:
    """`<table>-usage-<region>` with characters dashboards do not allow replaced by `-`."""
    return Fn.join("-", [re.sub(r"[^A-Za-z0-9_-]", "-", table_name), "usage", Aws.REGION])


def build_dashboard(
    scope: Construct,
    *,
    aggregator: AggregatorFunction,
    table: dynamodb.ITable,
    alarms: list[cw.Alarm],
    props: ZaeLimiterProps,
) -> cw.Dashboard:
    """Usage (from the aggregator's metrics), aggregator health, table capacity and throttles."""
    function = aggregator.function
    timeout_ms = props.aggregator_timeout_seconds * 1000
    deployment = props.table_name

    def graph(title: str, left: list[cw.IMetric], **extra: Any) -> cw.GraphWidget:
        return cw.GraphWidget(title=title, left=left, width=8, height=6, **extra)

    dashboard = cw.Dashboard(
        scope,
        "Dashboard",
        dashboard_name=dashboard_name(props.table_name),
        default_interval=Duration.hours(3),
    )
    dashboard.add_widgets(
        cw.TextWidget(
            markdown=(
                f"# zae-limiter: {props.table_name}\n"
                f"Usage comes from the aggregator's metrics (namespace `{METRIC_NAMESPACE}`, "
                f"`{DEPLOYMENT_DIMENSION}={props.table_name}`, one series per namespace, "
                "resource and limit); it lags the stream by seconds."
            ),
            width=24,
            height=2,
        )
    )
    dashboard.add_widgets(
        graph("Consumption per resource and limit", [usage_search(deployment, "Consumed", "Sum")]),
        graph("Admissions", [usage_search(deployment, "Admissions", "Sum")]),
        graph("Overdrawn writes (soft limits)", [usage_search(deployment, "Overdrawn", "Sum")]),
    )
    dashboard.add_widgets(
        graph(
            "Aggregator invocations and errors",
            [
                function.metric_invocations(period=FIVE_MINUTES, statistic="Sum"),
                function.metric_errors(period=FIVE_MINUTES, statistic="Sum"),
            ],
            right=[error_rate(aggregator)],
        ),
        graph(
            "Aggregator duration",
            [
                function.metric_duration(period=FIVE_MINUTES, statistic="Average"),
                function.metric_duration(period=FIVE_MINUTES, statistic="Maximum"),
            ],
            left_annotations=[
                cw.HorizontalAnnotation(value=timeout_ms, label="Timeout"),
            ],
        ),
        graph(
            "Stream lag and DLQ depth",
            [
                function.metric("IteratorAge", period=ONE_MINUTE, statistic="Maximum"),
                usage_search(deployment, LAG_METRIC, "Maximum"),
            ],
            right=[
                aggregator.dead_letter_queue.metric_approximate_number_of_messages_visible(
                    period=ONE_MINUTE, statistic="Maximum"
                )
            ],
        ),
    )
    dashboard.add_widgets(
        graph(
            "Table consumed capacity",
            [
                table.metric_consumed_read_capacity_units(period=FIVE_MINUTES),
                table.metric_consumed_write_capacity_units(period=FIVE_MINUTES),
            ],
        ),
        graph("Table throttles", [throttle_events(table, "Read"), throttle_events(table, "Write")]),
        graph(
            "Table latency (average, ms)",
            [
                table.metric_successful_request_latency(
                    period=FIVE_MINUTES,
                    statistic="Average",
                    dimensions_map={"TableName": table.table_name, "Operation": operation},
                    label=operation,
                )
                for operation in LATENCY_OPERATIONS
            ],
        ),
    )
    if alarms:
        dashboard.add_widgets(
            cw.AlarmStatusWidget(alarms=list(alarms), title="Alarms", width=24, height=3)
        )
    return dashboard
