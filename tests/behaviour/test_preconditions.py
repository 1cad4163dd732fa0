"""The exactly-once rules' preconditions, broken on purpose (docs/on-unavailable.md).

- Clocks: an item stamped by a writer further ahead of this writer's clock than MAX_SKEW_MS is
  counted (`skewed_items`), logged, and settled toward rejecting (no re-send, no pruning).
- Expiry: an item outlives any re-send bound, however fast its limit refills.
- Both counters reach OpenTelemetry.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from support.clock import FakeClock
from support.faultproxy import fault_proxy
from support.tables import TableRef
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, Repository
from zae_limiter.acquire.lanes import PRUNE_AGE_MS
from zae_limiter.acquire.planning import MIN_EXPIRY_MS
from zae_limiter.acquire.skew import MAX_SKEW_MS
from zae_limiter.dynamo import keys
from zae_limiter.integrations.otel import instrument


async def open_at(table: TableRef, clock: FakeClock, url: str | None = None) -> Repository:
    return await Repository.open(
        table=table.name, endpoint_url=url or table.endpoint_url, region=table.region, clock=clock
    )


@pytest.mark.parametrize("ahead_ms", [MAX_SKEW_MS + 1, 10 * 60_000])
async def test_an_item_stamped_too_far_ahead_is_counted_logged_and_never_re_sent(
    table: TableRef, clock: FakeClock, caplog: pytest.LogCaptureFixture, ahead_ms: int
) -> None:
    fast = await open_at(table, FakeClock(clock() + ahead_ms))
    await fast.set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    async with RateLimiter(fast).acquire("u", "api", {"units": 1}):
        pass  # its entry on the item is `ahead_ms` ahead of `clock`
    async with fault_proxy(
        table.endpoint_url, seed=1, rate=1.0, kinds=("lost",), operations=("UpdateItem",)
    ) as proxy:
        slow = await open_at(table, clock, proxy.url)
        with (
            caplog.at_level(logging.WARNING, logger="zae_limiter"),
            pytest.raises(RateLimiterUnavailable),
        ):
            async with RateLimiter(slow).acquire("u", "api", {"units": 10}):
                pass
        stats = slow.get_cache_stats()
        await slow.close()
    assert stats.skewed_items == 1
    assert proxy.counts["lost"] == 1  # settled at once: a re-send could apply twice
    assert stats.undecided_writes == 1  # not admitted; the debit that landed stays
    assert any("stamped" in r.message and "ahead of this writer's clock" in r.message
               for r in caplog.records)  # fmt: skip
    [state] = await fast.get_buckets("u")
    assert state.total_consumed == 11  # over-counts, never admits extra
    await fast.close()


async def test_clocks_within_the_allowance_re_send_as_usual(
    table: TableRef, clock: FakeClock
) -> None:
    fast = await open_at(table, FakeClock(clock() + MAX_SKEW_MS))
    await fast.set_resource_defaults("api", [Limit.per_hour("units", 1_000)])
    async with RateLimiter(fast).acquire("u", "api", {"units": 1}):
        pass
    async with fault_proxy(
        table.endpoint_url, seed=1, rate=1.0, kinds=("lost",), operations=("UpdateItem",),
        max_faults=1,
    ) as proxy:  # fmt: skip
        slow = await open_at(table, clock, proxy.url)
        async with RateLimiter(slow).acquire("u", "api", {"units": 10}):
            pass  # the lost answer is re-sent and decided
        stats = slow.get_cache_stats()
        await slow.close()
    assert (proxy.counts["lost"], stats.skewed_items, stats.undecided_writes) == (1, 0, 0)
    [state] = await fast.get_buckets("u")
    assert state.total_consumed == 11
    await fast.close()


async def test_an_item_outlives_the_re_send_bound_however_fast_it_refills(
    table: TableRef, clock: FakeClock
) -> None:
    assert MAX_SKEW_MS < PRUNE_AGE_MS <= MIN_EXPIRY_MS
    repo = await Repository.open(
        table=table.name,
        endpoint_url=table.endpoint_url,
        region=table.region,
        clock=clock,
        bucket_ttl_multiplier=1,
    )
    await repo.set_resource_defaults("api", [Limit.per_second("rps", 2)])  # full again in 1 s
    async with RateLimiter(repo).acquire("u", "api", {"rps": 2}):
        pass
    item = await repo._store.get(keys.bucket(repo.namespace_id, "u", "api"))
    assert item is not None
    assert int(item["ttl"]) >= (clock() + MIN_EXPIRY_MS) // 1000
    clock.advance(seconds=30)  # past the refill horizon, inside the re-send bound
    [state] = await repo.get_buckets("u")
    assert state.total_consumed == 2  # not expired: a re-send would find its evidence here
    await repo.close()


async def test_the_exactness_counters_reach_opentelemetry(repo: Repository) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    instrument(RateLimiter(repo), meter_provider=provider)
    lanes = repo._admission.waves.lanes
    lanes.undecided, lanes.skew.sightings = 3, 2
    data = reader.get_metrics_data()
    assert data is not None
    seen: dict[str, Any] = {
        metric.name: [p.value for p in metric.data.data_points if isinstance(p, NumberDataPoint)]
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert seen["zae_limiter.undecided_writes"] == [3]
    assert seen["zae_limiter.skewed_items"] == [2]
    provider.shutdown()
