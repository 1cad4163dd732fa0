"""OpenTelemetry for acquire (the `otel` extra; OpenTelemetry API only). See docs/integrations.md.

`instrument(limiter)` returns a limiter whose `acquire` is traced and measured; nothing else
changes, and nothing happens unless OpenTelemetry is installed and `instrument` is called
(`enabled=False`, or the `ZAEL_OTEL=off` environment variable, turns it off). Importing
`zae_limiter` never imports this module.

Per acquire, span `zae_limiter.acquire`; per exit, span `zae_limiter.exit` (linked to it).
Attributes: `zae_limiter.resources`, `zae_limiter.decision` (acquire: `admitted`,
`rejected`, `disabled`, `degraded`, `error`; exit: `reconciled`, `refunded`, `error`),
`zae_limiter.round_trips`, `zae_limiter.requests`, `zae_limiter.read_units`,
`zae_limiter.write_units` (consumed capacity DynamoDB reported, from the request hook),
`zae_limiter.shard` (admitted), `zae_limiter.retry_after_seconds` and
`zae_limiter.violated_policies` (rejected).

Instruments (meter `zae_limiter`): counters `zae_limiter.admissions`,
`zae_limiter.rejections`, `zae_limiter.unmetered_admissions` (attribute `zae_limiter.reason`:
`unmetered` or `degraded`), `zae_limiter.capacity_units` (attribute `zae_limiter.kind`: `read`
or `write`), the up-down counter `zae_limiter.held` (what this process's leases hold of
concurrency limits, attributes `zae_limiter.resource` and `zae_limiter.limit`, never an
entity: added on admission, taken off on exit), and the histogram
`zae_limiter.acquire.duration` (ms) of admissions. Read from the repository's
`get_cache_stats()` at each collection (docs/on-unavailable.md): the counters
`zae_limiter.undecided_writes` (writes given up with their outcome unknown),
`zae_limiter.skewed_items` (items seen stamped too far ahead of this process's clock),
`zae_limiter.resolved_after_deadline`, `zae_limiter.refunded_after_deadline` and
`zae_limiter.abandoned_at_close` (work resolved off callers' paths),
`zae_limiter.shed_overloaded`, `zae_limiter.bucket_writes` and `zae_limiter.decided_calls`
(overload), and the gauges `zae_limiter.pending_resolutions` and
`zae_limiter.writes_per_decided_call`.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from ..errors import RateLimitExceeded, ResourceDisabled, policy_name
from ..instrumentation import RequestEvent
from ..lease_view import held_amounts, primary_shard, unmetered_resources
from ..limiter import RateLimiter
from ..sync import SyncAcquisition, SyncRateLimiter
from ..syncgen import async_of

try:
    from opentelemetry import metrics, trace
except ImportError:  # the `otel` extra is not installed
    metrics = trace = None  # type: ignore[assignment]

log = logging.getLogger("zae_limiter")

SCOPE = "zae_limiter"
ENV_SWITCH = "ZAEL_OTEL"
_ACQUIRE_SIGNATURE = inspect.signature(RateLimiter.acquire)
#: `get_cache_stats()` fields exported as observable counters (`zae_limiter.<field>`).
STAT_COUNTERS = {
    "undecided_writes": "Writes given up with their outcome unknown (every re-send lost)",
    "skewed_items": "Items seen stamped further ahead of this process's clock than allowed",
    "resolved_after_deadline": "Outcomes resolved after their caller stopped waiting",
    "refunded_after_deadline": "Item refunds landed for callers that had left",
    "abandoned_at_close": "Outcomes still unresolved when close() gave up",
    "shed_overloaded": "Calls answered at once: the table could not decide them in time",
    "bucket_writes": "Bucket write requests the acquire path sent",
    "decided_calls": "Calls admitted or refused (429)",
}


@dataclass
class _Requests:
    """The requests one acquire or exit sent, as the request hook reported them."""

    spans: list[tuple[float, float]] = field(default_factory=list)  # (start, end), seconds
    read_units: float = 0.0
    write_units: float = 0.0

    def add(self, event: RequestEvent, ended: float) -> None:
        self.spans.append((ended - event.duration_ms / 1000.0, ended))
        self.read_units += event.read_units or 0.0
        self.write_units += event.write_units or 0.0

    @property
    def round_trips(self) -> int:
        """The longest chain of requests each sent after the previous one's answer."""
        chain, free_at = 0, float("-inf")
        for start, end in sorted(self.spans, key=lambda s: s[1]):
            if start >= free_at:
                chain, free_at = chain + 1, end
        return chain

    def attributes(self) -> dict[str, Any]:
        return {
            "zae_limiter.round_trips": self.round_trips,
            "zae_limiter.requests": len(self.spans),
            "zae_limiter.read_units": self.read_units,
            "zae_limiter.write_units": self.write_units,
        }


_CURRENT: contextvars.ContextVar[_Requests | None] = contextvars.ContextVar(
    "zae_limiter_otel_requests", default=None
)


class _Telemetry:
    """The tracer, the instruments, and the request listener feeding them."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.meter = meter
        self.admissions = meter.create_counter(
            "zae_limiter.admissions", unit="{request}", description="Admitted acquires"
        )
        self.rejections = meter.create_counter(
            "zae_limiter.rejections", unit="{request}", description="Rejected acquires (429)"
        )
        self.unmetered = meter.create_counter(
            "zae_limiter.unmetered_admissions",
            unit="{request}",
            description="Admissions with nothing metered: no limits, or degraded (outage)",
        )
        self.capacity = meter.create_counter(
            "zae_limiter.capacity_units",
            unit="{capacity_unit}",
            description="DynamoDB capacity units acquires and exits consumed",
        )
        self.held = meter.create_up_down_counter(
            "zae_limiter.held",
            unit="{hold}",
            description="Concurrency limits held by this process's open leases",
        )
        self.latency = meter.create_histogram(
            "zae_limiter.acquire.duration", unit="ms", description="Time to admit or reject"
        )

    def observe(self, repository: Any) -> None:
        """The repository's exactness and deadline counters, read at each collection."""

        def reading(field_name: str) -> Any:
            def callback(_: Any) -> list[Any]:
                return [metrics.Observation(getattr(repository.get_cache_stats(), field_name))]

            return callback

        self.meter.create_observable_gauge(
            "zae_limiter.pending_resolutions",
            callbacks=[reading("pending_resolutions")],
            unit="{write}",
            description="Acquire outcomes still being resolved off callers' paths",
        )
        self.meter.create_observable_gauge(
            "zae_limiter.writes_per_decided_call",
            callbacks=[reading("writes_per_decided_call")],
            description="Bucket write requests per call admitted or refused (429)",
        )
        for name, description in STAT_COUNTERS.items():
            self.meter.create_observable_counter(
                f"zae_limiter.{name}", callbacks=[reading(name)], description=description
            )

    def on_request(self, event: RequestEvent) -> None:
        requests = _CURRENT.get()
        if requests is None:
            return
        requests.add(event, time.perf_counter())
        if event.read_units:
            self.capacity.add(event.read_units, {"zae_limiter.kind": "read"})
        if event.write_units:
            self.capacity.add(event.write_units, {"zae_limiter.kind": "write"})


class _TracedAcquisition:
    """`acquire()`'s context manager with a span around its admission and its exit."""

    def __init__(self, telemetry: _Telemetry, inner: Any, resources: Sequence[str]) -> None:
        self._t = telemetry
        self._inner = inner
        self._resources = tuple(resources)
        self._acquire_span: Any = None
        self._held: dict[tuple[str, str], int] = {}

    def _hold(self, sign: int) -> None:
        for (resource, limit), amount in self._held.items():
            attributes = {"zae_limiter.resource": resource, "zae_limiter.limit": limit}
            self._t.held.add(sign * amount, attributes)

    def _base(self) -> dict[str, Any]:
        return {"zae_limiter.resources": self._resources}

    async def __aenter__(self) -> Any:
        t, requests = self._t, _Requests()
        primary = {"zae_limiter.resource": self._resources[0]}
        span = t.tracer.start_span("zae_limiter.acquire", attributes=self._base())
        self._acquire_span = span
        token = _CURRENT.set(requests)
        started = time.perf_counter()
        try:
            lease = await self._inner.__aenter__()
        except RateLimitExceeded as exc:
            violated = exc.as_dict(public=True)["violations"]
            span.set_attributes(
                {
                    "zae_limiter.decision": "rejected",
                    "zae_limiter.retry_after_seconds": exc.retry_after_seconds,
                    "zae_limiter.violated_policies": [
                        policy_name(v["resource"], v["limit_name"], parent=v["parent"])
                        for v in violated
                    ],
                }
            )
            t.rejections.add(1, primary)
            raise
        except ResourceDisabled:
            span.set_attribute("zae_limiter.decision", "disabled")
            raise
        except BaseException as exc:
            _failed(span, exc)
            raise
        else:
            if getattr(lease, "degraded", False):
                span.set_attribute("zae_limiter.decision", "degraded")
                t.unmetered.add(1, {**primary, "zae_limiter.reason": "degraded"})
            else:
                span.set_attribute("zae_limiter.decision", "admitted")
                t.admissions.add(1, primary)
                for name in unmetered_resources(lease):
                    reason = {"zae_limiter.resource": name, "zae_limiter.reason": "unmetered"}
                    t.unmetered.add(1, reason)
                shard = primary_shard(lease)
                if shard is not None:
                    span.set_attribute("zae_limiter.shard", shard)
                self._held = held_amounts(lease)
                self._hold(+1)
            return lease
        finally:
            _CURRENT.reset(token)
            t.latency.record((time.perf_counter() - started) * 1000.0, primary)
            span.set_attributes(requests.attributes())
            span.end()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        t, requests = self._t, _Requests()
        acquired = self._acquire_span
        links = [] if acquired is None else [trace.Link(acquired.get_span_context())]
        span = t.tracer.start_span(
            "zae_limiter.exit",
            attributes={
                **self._base(),
                "zae_limiter.decision": "reconciled" if exc_type is None else "refunded",
            },
            links=links,
        )
        token = _CURRENT.set(requests)
        self._hold(-1)  # what admission added, whatever the exit's outcome: it nets to zero
        self._held = {}
        try:
            result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
            return result
        except BaseException as failure:
            _failed(span, failure)
            raise
        finally:
            _CURRENT.reset(token)
            span.set_attributes(requests.attributes())
            span.end()


def _failed(span: Any, exc: BaseException) -> None:
    span.set_attribute("zae_limiter.decision", "error")
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))


class TracedRateLimiter(RateLimiter):
    """A `RateLimiter` whose `acquire` is traced and measured (made by `instrument`)."""

    def __init__(self, limiter: RateLimiter, telemetry: _Telemetry) -> None:
        super().__init__(limiter.repository)
        self._telemetry = telemetry

    def acquire(self, *args: Any, **kwargs: Any) -> Any:  # same parameters as RateLimiter's
        inner = super().acquire(*args, **kwargs)  # validates before anything is traced
        bound = _ACQUIRE_SIGNATURE.bind(self, *args, **kwargs)
        resources = [bound.arguments["resource"], *(bound.arguments.get("also") or {})]
        return _TracedAcquisition(self._telemetry, inner, resources)


TracedRateLimiter.acquire.__signature__ = _ACQUIRE_SIGNATURE  # type: ignore[attr-defined]


class TracedSyncRateLimiter(SyncRateLimiter):
    """A `SyncRateLimiter` whose `acquire` is traced and measured (made by `instrument`)."""

    def __init__(self, limiter: SyncRateLimiter, telemetry: _Telemetry) -> None:
        self._async = TracedRateLimiter(async_of(limiter), telemetry)

    def acquire(self, *args: Any, **kwargs: Any) -> SyncAcquisition:
        return SyncAcquisition(self._async.acquire(*args, **kwargs))


def enabled_by_environment() -> bool:
    """False when `ZAEL_OTEL` is `0`, `off`, `false` or `no`."""
    return os.environ.get(ENV_SWITCH, "on").strip().lower() not in {"0", "off", "false", "no"}


def instrument(
    limiter: Any,
    *,
    enabled: bool | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> Any:
    """A traced twin of `limiter` (`RateLimiter` or `SyncRateLimiter`) on the same repository.

    Returns `limiter` itself when disabled (`enabled=False`, or `ZAEL_OTEL=off` when
    `enabled` is None) or when OpenTelemetry is not installed (logged as a warning).
    Providers default to OpenTelemetry's global ones.
    """
    if not (enabled_by_environment() if enabled is None else enabled):
        return limiter
    if trace is None:
        log.warning(
            "zae_limiter.integrations.otel: opentelemetry-api is not installed "
            "(pip install 'zae-limiter[otel]'); acquire is not traced"
        )
        return limiter
    telemetry = _Telemetry(tracer_provider, meter_provider)
    if isinstance(limiter, SyncRateLimiter):
        traced: Any = TracedSyncRateLimiter(limiter, telemetry)
        repository = async_of(limiter).repository
    elif isinstance(limiter, RateLimiter):
        traced = TracedRateLimiter(limiter, telemetry)
        repository = limiter.repository
    else:
        raise TypeError(f"instrument() takes a RateLimiter or SyncRateLimiter, not {limiter!r}")
    repository.add_request_listener(telemetry.on_request)
    telemetry.observe(repository)
    return traced
