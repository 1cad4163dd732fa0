"""Outages of seconds to minutes: what is left after them, and how work off callers' paths ended.

    .venv/bin/python -m benchmarks.outage_long [--shapes lost-20,kill-10] [--json FILE]

The shapes of tests/support/outage_shapes.py (the tests run the 20 s and 10 s ones), here also
at 60 s, and one more: `close-during`, lost answers then an outage that does not end before
`close(timeout=None)` (what a pod stopped during an incident does). Per shape: the calls' outcomes,
units left beyond the ledger of admitted leases (0 is exact), concurrency slots held after
recovery, alerts stored above real consumption, how long `close()` took, and the counters of
work resolved by re-sending the same write, by reading the writer's entry, and left at close
(one line per item). Uses only the public API both trees share (plus the tests' proxy), so an
earlier tree is measured by the same script:

    git archive main runtime | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/runtime .venv/bin/python -m benchmarks.outage_long

Each shape starts its own DynamoDB Local (the kill shapes SIGKILL theirs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import outage_shapes
from support.outage import outage_proxy
from zae_limiter import RateLimiter, RateLimiterUnavailable, Repository
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

SHAPES = ("lost-20", "lost-60", "kill-10", "kill-60", "close-during")
CLOSE_CAP_S = 240.0  # the benchmark's cap on one close() (0.17.x waited up to ~176 s)


def _row(shape: str, report: outage_shapes.Report) -> dict[str, Any]:
    c = report.counters
    return {
        "shape": shape,
        "outcomes": dict(report.outcomes),
        "left_units": sum(abs(v) for v in report.left.values()),
        "left_buckets": len(report.left),
        "slots_held": report.slots_held,
        "spurious_alerts": len(report.spurious_alerts),
        "alerts": report.extra.get("alerts"),
        "close_s": round(report.close_s, 1),
        "resolved_by_resend": c.get("resolved_by_resend"),
        "resolved_by_read": c.get("resolved_by_read"),
        "left_at_close": c.get("abandoned_at_close", 0),
        "undecided": c.get("undecided_writes", 0),
    }


async def lost(seconds: float, calls: int) -> outage_shapes.Report:
    engine = start_engine()
    try:
        table = "outage-long"
        await Repository.create_table(
            table=table, endpoint_url=engine.endpoint_url, region=LOCAL_REGION
        )
        return await outage_shapes.lost_then_outage(
            engine.endpoint_url, table, outage_s=seconds, calls=calls, deadline=None
        )
    finally:
        engine.stop()


async def close_during(calls: int) -> outage_shapes.Report:
    """Answers held (never given) with the default client timeouts, through
    `close(timeout=None)`: what a pod stopped during an incident does."""
    engine = start_engine()
    try:
        table = "outage-close"
        endpoint = engine.endpoint_url
        await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
        admin = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
        await outage_shapes.define(admin)
        async with outage_proxy(endpoint) as proxy:
            repo = await Repository.open(table=table, endpoint_url=proxy.url, region=LOCAL_REGION)
            limiter = RateLimiter(repo)
            entities = [f"e{i}" for i in range(calls)]
            for entity in entities:
                async with limiter.acquire(entity, "api", {"rpm": 1}, timeout=None):
                    pass
            await proxy.set_mode("hold")
            for entity in entities:
                try:
                    async with limiter.acquire(entity, "api", {"rpm": 1}):
                        pass
                except RateLimiterUnavailable:
                    pass
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(repo.close(), CLOSE_CAP_S)
            close_s = time.monotonic() - started
            stats = repo.get_cache_stats().as_dict()
            await proxy.set_mode("pass")
        ledger = outage_shapes.Counter({(e, "api", "rpm"): 1 for e in entities})
        left = await outage_shapes.left_over(admin, set(entities), ledger)
        await admin.close()
    finally:
        engine.stop()
    counters = outage_shapes.Counter({k: v for k, v in stats.items() if isinstance(v, int)})
    return outage_shapes.Report(left, 0, [], close_s, counters, outage_shapes.Counter())


async def one(shape: str, calls: int) -> dict[str, Any]:
    kind, _, arg = shape.partition("-")
    if kind == "lost":
        report = await lost(float(arg), calls)
    elif kind == "kill":
        with tempfile.TemporaryDirectory() as data:
            report = await outage_shapes.engine_killed(Path(data), down_s=float(arg))
    else:
        report = await close_during(calls)
    return _row(shape, report)


def rows(shapes: tuple[str, ...] = SHAPES, calls: int = 6) -> list[dict[str, Any]]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    os.environ.pop("ZAEL_ACQUIRE_TIMEOUT", None)  # the production default deadline
    out = []
    for shape in shapes:
        out.append(asyncio.run(one(shape, calls)))
        print(json.dumps(out[-1]), file=sys.stderr)
    return out


def section(result: list[dict[str, Any]]) -> str:
    lines = [
        "| Shape | Outcomes | Units left (buckets) | Slots held | Alerts above use (stored) "
        "| close() s | Resolved by re-send / by read | Left at close | Undecided |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        lines.append(
            f"| {r['shape']} | {outcomes} | {r['left_units']} ({r['left_buckets']}) "
            f"| {r['slots_held']} | {r['spurious_alerts']} ({r['alerts']}) | {r['close_s']} "
            f"| {r['resolved_by_resend']} / {r['resolved_by_read']} | {r['left_at_close']} "
            f"| {r['undecided']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = rows(tuple(args.shapes.split(",")), args.calls)
    print(section(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
