"""Acquire under outages: time per acquire, outcomes, and what is left after close() drained.

    .venv/bin/python -m benchmarks.outage [--calls 40] [--shapes stopped,hold] [--json FILE]

Starts DynamoDB Local on 127.0.0.1 and the tests' switchable outage proxy in front of it
(tests/support/outage.py), in a process of its own (benchmarks/outage_proxy.py). Per shape
(engine stopped with SIGSTOP, answers held 30 s, 2 s latency on half of the writes, connection
refused, throttling), deadline (`timeout=0.2` and `1.0`) and mode (BLOCK, ALLOW): `--calls`
warm single-resource acquires from 8 tasks while the fault lasts, each adjusting in its block
(an exit write). Reports p50/p99/max of the time from entering `async with` to the lease or the
exception, and of the exit; the outcomes; then, after the engine recovered and `close()`
drained, the units left beyond the ledger of admitted leases (0 is exact) and the counters of
work resolved off callers' paths; beside each row how late the p99 caller returned and how late
the event loop ran (benchmarks/outage_calls.py). In `benchmarks.run` the phase then runs 0.17.0
(no deadline) behind the same proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from botocore.config import Config

from benchmarks import outage_long
from benchmarks.outage_calls import run_calls, summary
from benchmarks.outage_proxy import ProxyProcess
from support.outage import resume_engine, stop_engine
from zae_limiter import (
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    Repository,
)
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

SHAPES = ("stopped", "hold", "slow_half", "refuse", "throttle")
TIMEOUTS = (0.2, 1.0)
TASKS = 8
BIG = 10**12
THEIRS_CAP_S = 60.0  # the benchmark's cap on one 0.17.0 call (it has no deadline)


async def one_cell(
    endpoint: str,
    proxy: ProxyProcess,
    table: str,
    pid: int,
    shape: str,
    timeout: float,
    mode: OnUnavailable,
    calls: int,
) -> dict[str, Any]:
    entity = f"{shape}-{timeout}-{mode.name}"
    admin = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(
        table=table,
        endpoint_url=proxy.url,
        region=LOCAL_REGION,
        acquire_timeout=timeout,
        client_config=Config(connect_timeout=1, read_timeout=1),
    )
    limiter = RateLimiter(repo)
    async with limiter.acquire(entity, "api", {"rpm": 1}, timeout=None):
        pass  # warm
    with fault(proxy, shape, pid):
        raw = await run_calls(
            limiter, entity, mode, RateLimiterUnavailable, calls=calls, tasks=TASKS
        )
    await repo.close()
    stats = repo.get_cache_stats()
    consumed = sum(s.total_consumed for s in await admin.get_buckets(entity))
    await admin.close()
    owed = 1 + 2 * raw["outcomes"].get("admitted", 0)  # the warm-up, then 1 + 1 adjusted each
    return {
        "shape": shape,
        "timeout_s": timeout,
        "mode": mode.name,
        **summary(raw, timeout),
        "left_units": consumed - owed,  # beyond the ledger of admitted leases: 0 is exact
        "resolved_after_deadline": stats.resolved_after_deadline,
        "refunded_after_deadline": stats.refunded_after_deadline,
        "abandoned_at_close": stats.abandoned_at_close,
        "undecided_writes": stats.undecided_writes,
    }


@contextmanager
def fault(proxy: ProxyProcess, shape: str, pid: int) -> Iterator[None]:
    """The shape's fault while the block runs: the engine stopped, or the proxy's mode."""
    if shape == "stopped":
        stop_engine(pid)
        _check_stopped(pid, "after SIGSTOP")
    else:
        proxy.set_mode(shape)
    try:
        yield
        if shape == "stopped":  # a row whose engine ran again meanwhile measures nothing
            _check_stopped(pid, "at the end of the row")
    finally:
        if shape == "stopped":
            resume_engine(pid)
        proxy.set_mode("pass")


def _check_stopped(pid: int, when: str) -> None:
    """Raise unless the process is in the stopped state ("T" in /proc/PID/stat)."""
    for _ in range(100):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        time.sleep(0.01)
    raise RuntimeError(f"the engine (pid {pid}) is not stopped {when}: state {state!r}")


async def run(endpoint: str, pid: int, calls: int, shapes: tuple[str, ...]) -> list[dict[str, Any]]:
    table = "outage-bench"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    admin = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    await admin.set_resource_defaults("api", [Limit.per_day("rpm", BIG)])
    await admin.close()
    proxy = ProxyProcess(endpoint)
    rows = []
    try:
        for shape in shapes:
            for timeout in TIMEOUTS:
                for mode in (OnUnavailable.BLOCK, OnUnavailable.ALLOW):
                    rows.append(
                        await one_cell(endpoint, proxy, table, pid, shape, timeout, mode, calls)
                    )
                    print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        proxy.close()
    return rows


def theirs_rows(
    worker: Any, endpoint: str, pid: int, shapes: tuple[str, ...]
) -> list[dict[str, Any]]:
    """0.17.0 (a `benchmarks.run` worker in its venv) behind the same proxy: TASKS warm
    single-resource acquires per row, one per task, each capped at THEIRS_CAP_S."""
    proxy = ProxyProcess(endpoint)
    rows = []
    try:
        for shape in shapes:
            for mode in ("BLOCK", "ALLOW"):
                entity = f"{shape}-{mode}"
                worker.call("outage_setup", upstream=endpoint, proxy_url=proxy.url, entity=entity)
                with fault(proxy, shape, pid):
                    raw = worker.call(
                        "outage_calls", mode=mode, calls=TASKS, tasks=TASKS, cap_s=THEIRS_CAP_S
                    )
                rows.append({"shape": shape, "mode": mode, **summary(raw, None)})
                print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        proxy.close()
    return rows


def table_of(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Shape | Timeout | Mode | p50 ms | p99 ms | max ms | p99 - deadline ms | loop lag p99 "
        "/ max ms | exit max ms | Outcomes | Left after drain | Resolved / refunded after "
        "deadline |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['timeout_s']:g} s | {r['mode']} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['max_ms']} | {r['late_p99_ms']} | {r['lag_p99_ms']} / {r['lag_max_ms']} "
            f"| {r['exit_max_ms']} | {_outcomes(r)} | {r['left_units']} | "
            f"{r['resolved_after_deadline']} / {r['refunded_after_deadline']} |"
        )
    return "\n".join(lines)


def theirs_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| Shape | Mode | p50 ms | p99 (= max) ms | loop lag p99 / max ms | exit max ms | "
        "Outcomes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['mode']} | {r['p50_ms']} | {r['p99_ms']} | {r['lag_p99_ms']} / "
            f"{r['lag_max_ms']} | {r['exit_max_ms']} | {_outcomes(r)} |"
        )
    return "\n".join(lines)


def _outcomes(row: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(row["outcomes"].items()))


def missed(rows: list[dict[str, Any]], slack_ms: float = 50.0) -> list[dict[str, Any]]:
    """The rows whose p99 time per acquire is above the deadline plus `slack_ms`."""
    return [r for r in rows if r["p99_ms"] > 1000 * r["timeout_s"] + slack_ms]


def bench_phase(calls: int = 40, theirs: Any = None) -> dict[str, Any]:
    """The "outage" phase of `benchmarks.run` (its own engine: the phase stops it with SIGSTOP);
    `theirs`: the 0.17.0 worker, run behind the same proxy after ours."""
    load = os.getloadavg()[0]
    rows, theirs_result = measure(calls, SHAPES, theirs)
    return {
        "calls": calls,
        "load_before": load,
        "rows": rows,
        "missed": missed(rows),
        "theirs": theirs_result,
        "theirs_cap_s": THEIRS_CAP_S,
        "long": outage_long.rows(),  # outages of 20 s to minutes, the engine killed
    }


def section(result: dict[str, Any]) -> str:
    """The report's outage section: the table and the acceptance (p99 <= deadline + 50 ms)."""
    late = result["missed"]
    verdict = (
        "every row's p99 is within its deadline + 50 ms"
        if not late
        else "p99 above the deadline + 50 ms in "
        + ", ".join(f"{r['shape']} {r['timeout_s']:g} s {r['mode']}" for r in late)
    )
    parts = [
        f"{result['calls']} warm single-resource acquires per row from {TASKS} tasks "
        f'(load {result["load_before"]:.1f} at start): {verdict}. "p99 - deadline" is how '
        'late the p99 caller returned; "loop lag" how late a 5 ms sleep in the same loop '
        "woke during the row (a late loop delays every caller alike). The proxy runs in a "
        "process of its own.",
        table_of(result["rows"]),
    ]
    if result.get("long"):
        parts += [
            "Outages of 20 and 60 s after lost answers, the engine SIGKILLed for 10 and 60 s "
            "under load, and close() during an outage (benchmarks/outage_long.py):",
            outage_long.section(result["long"]),
        ]
    if result.get("theirs"):
        parts += [
            f"0.17.0 behind the same proxy (no deadline: {TASKS} acquires per row, one per task, "
            f"each capped at {result['theirs_cap_s']:g} s by the benchmark):",
            theirs_table(result["theirs"]),
        ]
    return "\n\n".join(parts)


def measure(
    calls: int, shapes: tuple[str, ...], theirs: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Start an engine, run every cell (ours, then 0.17.0's when given), stop the engine."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine()
    try:
        rows = asyncio.run(run(engine.endpoint_url, engine.pid, calls, shapes))
        theirs_result = (
            theirs_rows(theirs, engine.endpoint_url, engine.pid, shapes) if theirs else []
        )
        return rows, theirs_result
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help="a subset of " + ",".join(SHAPES)
    )
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    rows, _ = measure(args.calls, tuple(args.shapes.split(",")))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    print(table_of(rows))


if __name__ == "__main__":
    main()
