"""The callers of the outage phase, shared by both implementations (no import of either).

`calls` acquires from `tasks` tasks on one warm entity, each adjusting by one in its block (an
exit write); each acquire capped at `cap_s` seconds when given (0.17.0 has no deadline of its
own). Beside them a ticker measures the event loop's lag: how late a 5 ms sleep wakes, so a
caller that returns late can be told apart from a loop that ran late.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

TICK_S = 0.005


async def lag_ticker(lags: list[float]) -> None:
    """Append, until cancelled, how late each 5 ms sleep of this loop woke (seconds)."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(TICK_S)
        lags.append(loop.time() - before - TICK_S)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


async def run_calls(
    limiter: Any,
    entity: str,
    mode: Any,
    unavailable: type[BaseException],
    *,
    calls: int,
    tasks: int,
    cap_s: float | None = None,
) -> dict[str, Any]:
    """Times (seconds) to the lease or exception, exit times, outcomes, admitted count, lags."""
    entered: list[float] = []
    exited: list[float] = []
    lags: list[float] = []
    outcomes: Counter[str] = Counter()

    async def one() -> None:
        acquisition = limiter.acquire(entity, "api", {"rpm": 1}, on_unavailable=mode)
        started = time.perf_counter()
        try:
            lease = await asyncio.wait_for(acquisition.__aenter__(), cap_s)
        except unavailable:
            outcomes["refused"] += 1
            return
        except TimeoutError:
            outcomes[f"held past the {cap_s:g} s cap"] += 1
            return
        finally:
            entered.append(time.perf_counter() - started)
        if getattr(lease, "degraded", False):
            outcomes["degraded"] += 1
            await acquisition.__aexit__(None, None, None)
            return
        await lease.adjust(rpm=1)
        ended = time.perf_counter()
        try:
            await asyncio.wait_for(acquisition.__aexit__(None, None, None), cap_s)
            outcomes["admitted"] += 1
        except unavailable:
            outcomes["exit refused"] += 1
        except TimeoutError:
            outcomes[f"exit held past the {cap_s:g} s cap"] += 1
        exited.append(time.perf_counter() - ended)

    async def worker(n: int) -> None:
        for _ in range(n):
            await one()

    ticking = asyncio.ensure_future(lag_ticker(lags))
    try:
        await asyncio.gather(*(worker(calls // tasks) for _ in range(tasks)))
    finally:
        ticking.cancel()
    return {"entered": entered, "exited": exited, "outcomes": dict(outcomes), "lags": lags}


def summary(raw: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
    """A row's figures (ms) from `run_calls`' answer."""
    ms = [1000 * x for x in raw["entered"]]
    out_ms = [1000 * x for x in raw["exited"]]
    lag_ms = [1000 * x for x in raw["lags"]]
    row: dict[str, Any] = {
        "calls": len(ms),
        "p50_ms": round(percentile(ms, 0.5), 1),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
        "exit_max_ms": round(max(out_ms), 1) if out_ms else None,
        "outcomes": raw["outcomes"],
        "lag_p99_ms": round(percentile(lag_ms, 0.99), 1),
        "lag_max_ms": round(max(lag_ms, default=0.0), 1),
    }
    if timeout_s is not None:
        late = [x - 1000 * timeout_s for x in ms]
        row["late_p99_ms"] = round(percentile(late, 0.99), 1)
    return row


class Side:
    """One implementation behind the proxy, driven by the worker's ops `outage_setup` and
    `outage_calls` (the runner switches the fault on between the two)."""

    def __init__(self) -> None:
        self.repo: Any = None
        self.limiter: Any = None
        self.entity = ""

    async def setup(self, impl_name: str, upstream: str, proxy_url: str, entity: str) -> None:
        from benchmarks.impls import make_impl
        from zae_limiter import Limit, RateLimiter

        await self.close()
        table = f"outage-{entity}".replace(".", "-").replace("_", "-").lower()
        direct = make_impl(impl_name, upstream)
        await direct.create_table(table)
        self.repo = await make_impl(impl_name, proxy_url).open(table)
        self.limiter = RateLimiter(self.repo)
        await self.limiter.set_resource_defaults("api", [Limit.per_day("rpm", 10**12)])
        self.entity = entity
        async with self.limiter.acquire(entity, "api", {"rpm": 1}):
            pass  # warm

    async def calls(self, mode: str, calls: int, tasks: int, cap_s: float) -> dict[str, Any]:
        from zae_limiter import OnUnavailable, RateLimiterUnavailable

        return await run_calls(
            self.limiter,
            self.entity,
            OnUnavailable[mode],
            RateLimiterUnavailable,
            calls=calls,
            tasks=tasks,
            cap_s=cap_s,
        )

    async def close(self) -> None:
        if self.repo is not None:
            await self.repo.close()
            self.repo = None
