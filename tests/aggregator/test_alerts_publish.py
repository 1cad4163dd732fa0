"""Publishing threshold alerts: EventBridge (moto's server, as the Lambda does) and the local
JSON-lines log; a failed put is retried from the stored alert, never lost nor repeated."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from support.clock import FakeClock
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.alerts.held import HOLD_MS
from zae_limiter.alerts.sinks import DETAIL_TYPE, SOURCE, eventbridge_sink, jsonl_sink
from zae_limiter.cli import cli
from zae_limiter.local.stream_runner import StreamRunner

pytestmark = pytest.mark.ddb
REGION = "us-east-1"


class FailingOnce:
    """A boto3 `events` client whose first put_events is refused (as EventBridge reports it)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.refused = 0

    def put_events(self, **kwargs: Any) -> Any:
        if not self.refused:
            self.refused += 1
            return {"FailedEntryCount": 1, "Entries": [{"ErrorCode": "InternalFailure"}]}
        return self.client.put_events(**kwargs)


def _bus_with_queue(endpoint: str, name: str) -> tuple[Any, Any, str]:
    kwargs: dict[str, Any] = {
        "endpoint_url": endpoint,
        "region_name": REGION,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }
    events, sqs = boto3.client("events", **kwargs), boto3.client("sqs", **kwargs)
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=f"{name}-q")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name="alerts", EventBusName=name, EventPattern=json.dumps({"source": [SOURCE]}))
    events.put_targets(Rule="alerts", EventBusName=name, Targets=[{"Id": "q", "Arn": arn}])
    return events, sqs, queue


def _received(sqs: Any, queue: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while True:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10).get("Messages", [])
        if not got:
            return out
        out += [json.loads(m["Body"]) for m in got]


async def test_eventbridge_gets_each_alert_once_after_a_refused_put(
    repo: Repository, clock: FakeClock, moto_endpoint: str, table: TableRef
) -> None:
    events, sqs, queue = _bus_with_queue(moto_endpoint, f"bus-{table.name}")
    flaky = FailingOnce(events)
    clock.set_datetime(datetime(2026, 1, 6, 9, 0))
    await repo.set_resource_defaults(
        "budget", [Limit.quota("weekly", 100, cron="0 0 * * 1", alert_at=(50, 100))]
    )
    limiter = RateLimiter(repo)
    for amount in (60, 40):
        async with limiter.acquire("u1", "budget", consume={"weekly": amount}):
            pass
    sink = eventbridge_sink(flaky, f"bus-{table.name}", table.name)
    # (the aggregator's clock is the system clock, far past the writes' held crossings)
    async with StreamRunner.from_repository(repo, alerts=sink) as runner:
        records = [r for e in await runner.poll() for r in e["Records"]]
        first = await runner.aggregator.process(records)  # holds both crossings, sweeps them
        assert flaky.refused == 1 and not first.failures  # the 50 % crossing stays held
        # the 100 % alert is stored and published; the 50 % one is stored, its put refused
        assert (first.alerts_stored, first.alerts_published) == (1, 1)
        redelivered = await runner.aggregator.process(records)  # holds nothing new
        retried = await runner.aggregator.held.sweep_now()  # the next sweep publishes it
        again = await runner.aggregator.held.sweep_now()
    assert (redelivered.alerts_stored, redelivered.alerts_published) == (0, 0)
    assert not retried.failures and (retried.alerts_stored, retried.alerts_published) == (0, 1)
    assert (again.alerts_stored, again.alerts_published) == (0, 0)
    received = _received(sqs, queue)
    stored, _ = await repo.get_alerts("u1")
    assert sorted(m["detail"]["alert_id"] for m in received) == sorted(a.alert_id for a in stored)
    assert {(m["source"], m["detail-type"]) for m in received} == {(SOURCE, DETAIL_TYPE)}
    detail = next(m["detail"] for m in received if m["detail"]["threshold"] == 50)
    assert detail == {
        **next(a for a in stored if a.threshold == 50).to_dict(),
        "namespace": "default",  # named by its name, as people know it, with its id
        "namespace_id": repo.namespace_id,
        "table": table.name,
    }
    assert detail["used"] == 60 and detail["period_start"] == "2026-01-05T00:00:00Z"


async def test_local_log_and_cli_list(
    repo: Repository, clock: FakeClock, table: TableRef, tmp_path: Path
) -> None:
    clock.set(time.time_ns() // 1_000_000)  # the CLI reads on the system clock: not expired
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 10, alert_at=(80,))])
    async with RateLimiter(repo).acquire("u9", "search", consume={"rpm": 9}):
        pass
    log = tmp_path / "alerts.jsonl"
    later = clock() + HOLD_MS  # an aggregator past the crossing's hold (docs/alerts.md)
    async with StreamRunner.from_repository(
        repo, alerts=jsonl_sink(log, table.name), clock=lambda: later
    ) as runner:
        await runner.drain()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(x["entity_id"], x["limit_name"], x["threshold"], x["used"]) for x in lines] == [
        ("u9", "rpm", 80, 9)
    ]
    where = ["--table", table.name, "--endpoint-url", table.endpoint_url, "--region", REGION]
    result = CliRunner().invoke(cli, [*where, "-o", "json", "alerts", "list", "-e", "u9"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)["alerts"]
    assert [a["alert_id"] for a in listed] == [lines[0]["alert_id"]]
