"""Aggregator Lambda: the table's stream -> usage snapshots, metrics and the audit archive.

Thin shell around `zae_limiter.usage.aggregator.Aggregator` (the local stream runner runs the same
code). Powertools: structured JSON logs, CloudWatch EMF metrics (namespace `ZaeLimiter`), and the
batch processor's partial batch response, so only failed records are retried. DynamoDB is reached
through a boto3 client (Lambda's runtime has no aiobotocore), wrapped by `dynamo.threaded`.

Environment: `TABLE_NAME` (else taken from the event source ARN), `SNAPSHOT_WINDOWS`,
`USAGE_RETENTION_DAYS[_HOURLY|_DAILY|_MONTHLY]`, `AGGREGATOR_MARKER_TTL_HOURS` (see
`AggregatorSettings.from_env`), `ARCHIVE_BUCKET` (archive expired audit events to S3 when set),
`ALERTS_BUS` (publish threshold alerts to this EventBridge bus when set; docs/alerts.md),
`ZAEL_ENDPOINT_URL` (tests only), `ZAEL_REPLICA_REGIONS` (a table with multi-Region strong
consistency: its Regions; docs/multi-region.md). On such a table the construct also invokes this
function every few minutes with `{"zae_limiter": "sweep"}`: it then runs the sweeper
(`zae_limiter.admin.sweeper`) instead of processing a batch. On every table it invokes it each
minute with `{"zae_limiter": "held-alerts"}`: threshold crossings held until no refund can take
them back (`alerts.held`) are confirmed then even when no stream batch comes (docs/alerts.md).

Metrics, per batch, never with an entity dimension, and always with `deployment` (the table name,
so two deployments in one account and region never add into one series): `Consumed` and
`Overdrawn` by namespace/resource/limit, `Admissions` by namespace/resource; by service only:
`ProcessingLagMs` (age of the oldest change applied), `FailedRecords` (records reported for
retry) and `FailedBatches` (batches failed as a whole, e.g. a table schema this code cannot read).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from zae_limiter import audit
from zae_limiter.admin.sweeper import Sweeper, SweepReport
from zae_limiter.alerts.held import Swept
from zae_limiter.alerts.sinks import eventbridge_sink
from zae_limiter.dynamo.multi_region import MultiRegion
from zae_limiter.dynamo.store import Store
from zae_limiter.dynamo.threaded import client_config, threaded_transport
from zae_limiter.usage.aggregator import Aggregator, AggregatorSettings, ArchiveSink, BatchResult

SERVICE = "zae-limiter-aggregator"
ENV_REPLICA_REGIONS = "ZAEL_REPLICA_REGIONS"
METRIC_NAMESPACE = "ZaeLimiter"
#: The dimension every metric carries: which deployment (table) it comes from.
DEPLOYMENT_DIMENSION = "deployment"

logger = Logger(service=SERVICE)
copy_config_to_registered_loggers(source_logger=logger, include={"zae_limiter"})
metrics = Metrics(namespace=METRIC_NAMESPACE, service=SERVICE)
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)

# One event loop for the container's life: the DynamoDB client is bound to it.
_loop = asyncio.new_event_loop()
_aggregator: Aggregator | None = None


def _table_name(event: dict[str, Any]) -> str:
    name = os.environ.get("TABLE_NAME")
    if name:
        return name
    for record in event.get("Records") or []:
        arn = str(record.get("eventSourceARN", ""))
        if ":table/" in arn:
            return arn.split(":table/", 1)[1].split("/", 1)[0]
    raise ValueError("set TABLE_NAME: the event names no table")


def _s3_archive(bucket: str) -> ArchiveSink:
    s3 = boto3.client("s3")

    async def put(key: str, body: bytes) -> None:
        await asyncio.to_thread(
            s3.put_object,
            Bucket=bucket,
            Key=key,
            Body=body,
            ContentType="application/x-ndjson",
            ContentEncoding="gzip",
        )

    return put


async def _get_aggregator(event: dict[str, Any]) -> Aggregator:
    global _aggregator
    table = _table_name(event)
    if _aggregator is None or _aggregator.table != table:
        if _aggregator is not None:
            await _aggregator.close()
        bucket = os.environ.get("ARCHIVE_BUCKET")
        client = boto3.client(
            "dynamodb",
            endpoint_url=os.environ.get("ZAEL_ENDPOINT_URL") or None,
            config=client_config(),
        )
        transport = threaded_transport(client)
        bus = os.environ.get("ALERTS_BUS")
        store = Store(transport, table)
        store.multi_region = _multi_region()
        _aggregator = Aggregator(
            store,
            AggregatorSettings.from_env(),
            archive=_s3_archive(bucket) if bucket else None,
            transport_owned=transport,
            alerts=eventbridge_sink(boto3.client("events"), bus, table) if bus else None,
        )
    return _aggregator


def _multi_region() -> MultiRegion | None:
    """The table's Regions when the construct made it a global table with strong consistency."""
    regions = [r for r in os.environ.get(ENV_REPLICA_REGIONS, "").split(",") if r]
    if not regions:
        return None
    local = os.environ.get("AWS_REGION") or regions[0]
    return MultiRegion(tuple(sorted({*regions, local})), local)


def _now_ms() -> int:
    """The sweeper's clock (epoch ms)."""
    return time.time_ns() // 1_000_000


async def _sweep(event: dict[str, Any]) -> SweepReport:
    aggregator = await _get_aggregator(event)
    bucket = os.environ.get("ARCHIVE_BUCKET")
    # The audit events it writes (a balance operation it finishes) keep the table's retention.
    retention = (await aggregator.check_version()).get("audit_retention_days")
    sweeper = Sweeper(
        aggregator.store,
        _now_ms,
        archive=_s3_archive(bucket) if bucket else None,
        audit_retention_days=int(retention) if retention else audit.DEFAULT_RETENTION_DAYS,
    )
    return await sweeper.sweep()


async def _held_alerts(event: dict[str, Any]) -> Swept:
    aggregator = await _get_aggregator(event)
    return await aggregator.held.sweep_now()


async def _process(event: dict[str, Any]) -> BatchResult:
    aggregator = await _get_aggregator(event)
    return await aggregator.process(list(event.get("Records") or []))


def _publish(outcome: BatchResult, deployment: str) -> None:
    metrics.add_metric(name="FailedRecords", unit=MetricUnit.Count, value=len(outcome.failures))
    for point in outcome.metrics:
        if not point.dimensions:
            metrics.add_metric(name=point.name, unit=MetricUnit(point.unit), value=point.value)
            continue
        with single_metric(
            name=point.name,
            unit=MetricUnit(point.unit),
            value=point.value,
            namespace=METRIC_NAMESPACE,
            default_dimensions={DEPLOYMENT_DIMENSION: deployment, **dict(point.dimensions)},
        ):
            pass
    logger.info(
        "batch processed",
        extra={
            "records": outcome.total,
            "applied": outcome.applied,
            "duplicates": outcome.duplicates,
            "ignored": outcome.ignored,
            "archived": outcome.archived,
            "alerts_stored": outcome.alerts_stored,
            "alerts_published": outcome.alerts_published,
            "failed": len(outcome.failures),
        },
    )


def _serve(deployment: str) -> None:
    """Tag every metric of this batch with its table, before any is added. Default dimensions
    outlive each flush; a process that served another table drops that one first (setting a
    dimension over a different value only warns and keeps a stale default)."""
    if metrics.default_dimensions.get(DEPLOYMENT_DIMENSION) == deployment:
        return
    metrics.clear_default_dimensions()
    metrics.clear_metrics()  # nothing of this batch yet: drops the old value's dimension only
    metrics.set_default_dimensions(**{DEPLOYMENT_DIMENSION: deployment})


@metrics.log_metrics
@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Apply the batch; report failed records so that only they (and later ones) are retried.

    Raises (the whole batch is retried) when the table's schema is one this code cannot read.
    """
    if event.get("zae_limiter") == "held-alerts":  # the schedule's (every table)
        swept = _loop.run_until_complete(_held_alerts(event))
        counts = {"alerts_stored": swept.alerts_stored, "alerts_published": swept.alerts_published}
        logger.info("held alerts swept", extra=counts)
        return {"held_alerts": counts}
    if event.get("zae_limiter") == "sweep":  # the schedule's (multi-Region tables only)
        report = _loop.run_until_complete(_sweep(event))
        logger.info("sweep done", extra=dataclasses.asdict(report))
        return {"sweep": dataclasses.asdict(report)}
    try:
        deployment = _table_name(event)
        _serve(deployment)
        outcome = _loop.run_until_complete(_process(event))
    except Exception:
        metrics.add_metric(name="FailedBatches", unit=MetricUnit.Count, value=1)
        logger.exception("the whole batch failed and will be retried")
        raise
    failures = {id(event["Records"][pos]): exc for pos, exc in outcome.failures.items()}

    def record_handler(record: DynamoDBRecord) -> None:
        failure = failures.get(id(record.raw_event))
        if failure is not None:
            raise failure

    _publish(outcome, deployment)
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
