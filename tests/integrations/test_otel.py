"""zae_limiter.integrations.otel with the OpenTelemetry SDK's in-memory exporter and reader, on
DynamoDB Local; and the import guarantee (no OpenTelemetry module unless asked for), in
subprocesses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from support.clock import FakeClock
from support.tables import TableRef
from zae_limiter import (
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
    SyncRateLimiter,
    SyncRepository,
)
from zae_limiter.integrations.asgi import RateLimitMiddleware
from zae_limiter.integrations.otel import TracedRateLimiter, instrument


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, limiter: Any) -> Any:
        return instrument(
            limiter, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider
        )

    def finished(self) -> list[tuple[str, dict[str, Any]]]:
        return [(s.name, dict(s.attributes or {})) for s in self.spans.get_finished_spans()]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """name -> [(attributes, value)]: sums for counters, counts for histograms."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = point.value if isinstance(point, NumberDataPoint) else point.count
                        attributes = dict(point.attributes or {})
                        out.setdefault(metric.name, []).append((attributes, value))
        return out


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.tracer_provider.shutdown()
    t.meter_provider.shutdown()


async def test_one_request_yields_the_spans_and_counters(
    limiter: RateLimiter, telemetry: Telemetry
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    traced = telemetry.instrument(limiter)
    assert isinstance(traced, TracedRateLimiter)
    async with traced.acquire("user-1", "search", {"rpm": 1}):  # cold: reads config and bucket
        pass
    telemetry.spans.clear()
    async with traced.acquire("user-1", "search", {"rpm": 1}) as lease:
        await lease.adjust(rpm=1)
    (acquire, acquired), (exit_name, exited) = telemetry.finished()
    assert acquire == "zae_limiter.acquire"
    assert acquired == {
        "zae_limiter.resources": ("search",),
        "zae_limiter.decision": "admitted",
        "zae_limiter.round_trips": 1,
        "zae_limiter.requests": 1,
        "zae_limiter.read_units": 0.0,
        "zae_limiter.write_units": 1.0,
        "zae_limiter.shard": 0,
    }
    assert exit_name == "zae_limiter.exit"
    assert exited["zae_limiter.decision"] == "reconciled"
    assert (exited["zae_limiter.round_trips"], exited["zae_limiter.write_units"]) == (1, 1.0)
    span_list = telemetry.spans.get_finished_spans()
    assert span_list[1].links[0].context.span_id == span_list[0].context.span_id
    metrics = telemetry.metrics()
    assert metrics["zae_limiter.admissions"] == [({"zae_limiter.resource": "search"}, 2)]
    assert metrics["zae_limiter.acquire.duration"] == [({"zae_limiter.resource": "search"}, 2)]
    capacity = dict((a["zae_limiter.kind"], v) for a, v in metrics["zae_limiter.capacity_units"])
    assert capacity["write"] >= 3.0  # cold admission, warm admission and its exit write
    assert "zae_limiter.rejections" not in metrics


async def test_rejections_refunds_disabled_and_unmetered(
    limiter: RateLimiter, repo: Repository, telemetry: Telemetry
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 1)])
    traced = telemetry.instrument(limiter)
    with pytest.raises(RuntimeError):
        async with traced.acquire("user-1", "search", {"rpm": 1}):
            raise RuntimeError("work failed")
    async with traced.acquire("user-1", "search", {"rpm": 1}):
        pass
    with pytest.raises(RateLimitExceeded):
        async with traced.acquire("user-1", "search", {"rpm": 1}):
            pass
    async with traced.acquire("user-1", "nothing-configured", {"anything": 1}):
        pass
    await repo.disable_resource("search")
    with pytest.raises(ResourceDisabled):
        async with traced.acquire("user-1", "search", {"rpm": 1}):
            pass
    decisions = [(name, attrs["zae_limiter.decision"]) for name, attrs in telemetry.finished()]
    assert decisions == [
        ("zae_limiter.acquire", "admitted"),
        ("zae_limiter.exit", "refunded"),
        ("zae_limiter.acquire", "admitted"),
        ("zae_limiter.exit", "reconciled"),
        ("zae_limiter.acquire", "rejected"),
        ("zae_limiter.acquire", "admitted"),
        ("zae_limiter.exit", "reconciled"),
        ("zae_limiter.acquire", "disabled"),
    ]
    rejected = telemetry.finished()[4][1]
    assert rejected["zae_limiter.violated_policies"] == ("search.rpm",)
    assert rejected["zae_limiter.retry_after_seconds"] > 59
    metrics = telemetry.metrics()
    assert metrics["zae_limiter.rejections"] == [({"zae_limiter.resource": "search"}, 1)]
    assert metrics["zae_limiter.unmetered_admissions"] == [
        ({"zae_limiter.resource": "nothing-configured", "zae_limiter.reason": "unmetered"}, 1)
    ]


async def test_the_middleware_with_a_traced_limiter(
    limiter: RateLimiter, telemetry: Telemetry
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def send(message: Any) -> None:
        sent.append(message)

    middleware = RateLimitMiddleware(
        app,
        limiter=telemetry.instrument(limiter),
        resource="search",
        entity=lambda scope: "user-1",
        consume={"rpm": 1},
    )
    await middleware({"type": "http", "headers": []}, None, send)  # type: ignore[arg-type]
    assert [name for name, _ in telemetry.finished()] == ["zae_limiter.acquire", "zae_limiter.exit"]
    assert dict(sent[0]["headers"])[b"ratelimit"] == b'"search.rpm";r=9;t=6'


def test_a_sync_limiter_is_traced_too(
    table: TableRef, clock: FakeClock, telemetry: Telemetry
) -> None:
    repo = SyncRepository.open(table=table.name, endpoint_url=table.endpoint_url, clock=clock)
    traced = telemetry.instrument(SyncRateLimiter(repo))
    try:
        traced.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
        with traced.acquire("user-1", "search", {"rpm": 1}) as lease:
            lease.adjust(rpm=1)
    finally:
        traced.close()
    assert [a["zae_limiter.decision"] for _, a in telemetry.finished()] == [
        "admitted",
        "reconciled",
    ]


def test_disabled_returns_the_limiter_itself(repo: Repository, monkeypatch: Any) -> None:
    limiter = RateLimiter(repo)
    assert instrument(limiter, enabled=False) is limiter
    monkeypatch.setenv("ZAEL_OTEL", "off")
    assert instrument(limiter) is limiter


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip() + done.stderr.strip()


def test_importing_the_package_pulls_no_opentelemetry_module() -> None:
    code = (
        "import sys, zae_limiter\n"
        "import zae_limiter.integrations.headers, zae_limiter.integrations.asgi\n"
        "import zae_limiter.integrations.aws_lambda\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert _run(code) == "[]"


def test_without_opentelemetry_instrument_is_a_no_op() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if the extra were not installed\n"
        "from zae_limiter import RateLimiter\n"
        "from zae_limiter.integrations.otel import instrument\n"
        "limiter = RateLimiter.__new__(RateLimiter)\n"
        "print(instrument(limiter) is limiter)"
    )
    out = _run(code)
    assert out.startswith("True") and "opentelemetry-api is not installed" in out


async def test_work_resolved_after_a_deadline_is_observed(
    limiter: RateLimiter, repo: Repository, telemetry: Telemetry
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    traced = telemetry.instrument(limiter)
    async with traced.acquire("user-1", "search", {"rpm": 1}):
        pass  # warm: the next admission is one write, which cannot answer within a microsecond
    with pytest.raises(RateLimiterUnavailable, match="any debit that lands will be refunded"):
        async with traced.acquire("user-1", "search", {"rpm": 1}, timeout=1e-6):
            pass
    await repo.close()  # drains: the debit landed for a caller that had left, and is refunded
    metrics = telemetry.metrics()
    assert metrics["zae_limiter.pending_resolutions"] == [({}, 0)]
    assert metrics["zae_limiter.resolved_after_deadline"] == [({}, 1)]
    assert metrics["zae_limiter.refunded_after_deadline"] == [({}, 1)]
    assert metrics["zae_limiter.abandoned_at_close"] == [({}, 0)]


async def test_held_concurrency_is_a_per_resource_up_down_counter(
    limiter: RateLimiter, telemetry: Telemetry
) -> None:
    """`zae_limiter.held`: what open leases hold, per resource and limit, never per entity."""
    await limiter.set_resource_defaults(
        "llm", [Limit.per_minute("requests", 100), Limit.concurrent("parallel", 4)]
    )
    traced = telemetry.instrument(limiter)
    where = {"zae_limiter.resource": "llm", "zae_limiter.limit": "parallel"}
    async with traced.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
        async with traced.acquire("user-2", "llm", {"requests": 1, "parallel": 2}):
            assert telemetry.metrics()["zae_limiter.held"] == [(where, 3)]
        assert telemetry.metrics()["zae_limiter.held"] == [(where, 1)]
    with pytest.raises(RuntimeError):
        async with traced.acquire("user-1", "llm", {"requests": 1, "parallel": 1}):
            assert telemetry.metrics()["zae_limiter.held"] == [(where, 1)]
            raise RuntimeError("the work failed: the lease is refunded")
    async with traced.acquire("user-1", "llm", {"requests": 1}):  # holds nothing
        assert telemetry.metrics()["zae_limiter.held"] == [(where, 0)]
    assert telemetry.metrics()["zae_limiter.held"] == [(where, 0)]
