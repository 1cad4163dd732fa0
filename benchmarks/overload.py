"""Overload: ours and 0.17.0 alternated, on DynamoDB Local and behind a table capped at N writes/s.

    .venv/bin/python -m benchmarks.run --phases overload     # in the full benchmark
    .venv/bin/python -m benchmarks.overload [--seconds 15] [--rows org32,...] [--json FILE]

Rows (benchmarks/overload_calls.py has the shapes): the hot organisation (15 s) and one hot item
(8 s) at 32 and 128 tasks, each on the engine and behind the capped proxy (30 write items a
second, benchmarks/overload_proxy.py); and the no-contention rows on the engine (8 s): 32 tasks
on distinct warm users and 32 tasks on one user, single and three-bucket. Per row and
implementation (who goes first alternates): admitted per second, 429s, 503s, writes per decided
call (write requests on the wire / admitted + 429), decision p50/p99/max, calls decided past the
1 s deadline and by how much, and the event loop's lag beside them; for ours, the counters of
`get_cache_stats()` over the row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.overload_calls import HOT_PER_SECOND, ORG_PER_MINUTE

CAP_PER_SECOND = 30
OVERLOAD_SECONDS = 15.0
QUIET_SECONDS = 8.0


@dataclass(frozen=True)
class Row:
    name: str
    shape: str
    case: str
    tasks: int
    capped: bool
    seconds: float


def rows(overload_s: float = OVERLOAD_SECONDS, quiet_s: float = QUIET_SECONDS) -> list[Row]:
    """Every row: the hot organisation for `overload_s` (its limit's burst, then its refill),
    one hot item and the no-contention shapes for `quiet_s`."""
    out = []
    for capped in (False, True):
        suffix = "-capped" if capped else ""
        for shape, seconds in (("org", overload_s), ("hot", quiet_s)):
            for tasks in (32, 128):
                out.append(Row(f"{shape}{tasks}{suffix}", shape, "", tasks, capped, seconds))
    for shape in ("distinct", "one_user"):
        for case in ("single", "three"):
            out.append(Row(f"{shape}-{case}", shape, case, 32, False, quiet_s))
    return out


def quick_rows() -> list[Row]:
    """A smoke run's rows: the hot organisation on the engine and capped, distinct users."""
    wanted = {"org32": 2.0, "org32-capped": 3.0, "distinct-single": 1.0}
    return [replace(r, seconds=wanted[r.name]) for r in rows() if r.name in wanted]


def engine_cpu_s(pid: int) -> float:
    """The engine process's CPU time so far (user + system, seconds; 0 without a pid)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_row(workers: dict[str, Any], row: Row, turn: int) -> dict[str, Any]:
    """One row, both implementations in turn (who goes first alternates with `turn`), each on a
    DynamoDB Local of its own: the engine slows down with everything written to it, even to
    tables since deleted (measured: the same implementation's distinct-three run three times on
    one engine took 5.2, 7.1 and 9.5 ms of engine CPU a call), so on a shared engine the second
    implementation of a row measures what the first left."""
    from benchmarks.overload_proxy import CappedProcess
    from zae_limiter.local import start_engine

    order = ("ours", "theirs") if turn % 2 == 0 else ("theirs", "ours")
    out: dict[str, Any] = {"row": row.__dict__, "load_before": os.getloadavg()[0]}
    for impl in order:
        if impl not in workers:
            continue
        engine = start_engine()
        proxy = CappedProcess(engine.endpoint_url, CAP_PER_SECOND) if row.capped else None
        try:
            out[impl] = run_side(workers[impl], row, engine.endpoint_url, engine.pid, proxy)
        finally:
            if proxy is not None:
                proxy.close()
            engine.stop()
        print(f"[overload] {row.name} {impl}: {_line(out[impl])}", file=sys.stderr, flush=True)
    return out


def run_side(worker: Any, row: Row, endpoint: str, engine_pid: int, proxy: Any) -> dict[str, Any]:
    """One implementation's run of `row` on the engine at `endpoint` (through `proxy` if any)."""
    worker.call(
        "overload_setup",
        upstream=endpoint,
        url=proxy.url if proxy is not None else endpoint,
        shape=row.shape,
        case=row.case,
        tasks=row.tasks,
    )
    if proxy is not None:
        proxy.counts()  # from here on
    cpu = engine_cpu_s(engine_pid)
    result: dict[str, Any] = worker.call("overload_run", seconds=row.seconds)
    writes = result["write_requests"] - result["throttled_requests"] or 1
    result["engine_cpu_ms_per_write"] = round(1000 * (engine_cpu_s(engine_pid) - cpu) / writes, 3)
    if proxy is not None:
        result["proxy"] = proxy.counts()
    result["load"] = os.getloadavg()[0]
    return result


def _line(r: dict[str, Any]) -> str:
    return (
        f"{r['admitted_per_s']}/s admitted {r['admitted']}, 429 {r['rejected']}, "
        f"503 {r['unavailable']}, writes/decided {r['writes_per_decided']}, "
        f"p50/p99/max {r['p50_ms']}/{r['p99_ms']}/{r['max_ms']} ms, past {r['past_deadline']} "
        f"(late p99 {r['late_p99_ms']}), lag p99/max {r['lag_p99_ms']}/{r['lag_max_ms']}, "
        f"errors {r['errors']}, proxy {r.get('proxy')}, stats {_ours_stats(r)}, "
        f"engine CPU {r.get('engine_cpu_ms_per_write')} ms/write, "
        f"load {r['load']:.1f}"
    )


def _ours_stats(r: dict[str, Any]) -> dict[str, Any]:
    keep = ("local_rejections", "shed_overloaded", "refunded_after_deadline", "undecided_writes")
    return {k: v for k, v in r.get("stats", {}).items() if k in keep}


def bench_phase(workers: dict[str, Any], selected: list[Row]) -> dict[str, Any]:
    """The "overload" phase of `benchmarks.run`: every row and implementation on a DynamoDB
    Local of its own (`run_row`), both implementations alternated."""
    results = [run_row(workers, row, turn) for turn, row in enumerate(selected)]
    return {"rows": results, "cap_per_second": CAP_PER_SECOND}


# --- the report ----------------------------------------------------------------------------------

#: Write requests of one warm call of each shape, nothing contended or refused: the figure
#: without overload that "writes per decided call" is held to (at most 1.5 times it).
WARM_WRITES = {"org": 3, "hot": 1}
#: The binding limit's allowance: capacity, and refill per second.
ALLOWANCE = {"org": (ORG_PER_MINUTE, ORG_PER_MINUTE / 60), "hot": (HOT_PER_SECOND, HOT_PER_SECOND)}


def allowed_per_s(shape: str, wall_s: float) -> float:
    """What the binding limit lets through per second over a row of `wall_s` seconds."""
    capacity, refill = ALLOWANCE[shape]
    return (capacity + refill * wall_s) / wall_s


def verdicts(entry: dict[str, Any]) -> list[str]:
    """The acceptance checks a row fails (docs/performance.md "Overload"); [] when it passes."""
    row, ours, theirs = entry["row"], entry.get("ours"), entry.get("theirs")
    if ours is None or theirs is None:
        return ["not run for both"]
    failed = []
    if ours["admitted_per_s"] < theirs["admitted_per_s"]:
        failed.append("admitted/s below 0.17.0's")
    if row["shape"] in ALLOWANCE:
        if ours["admitted_per_s"] < 0.9 * allowed_per_s(row["shape"], ours["wall_s"]):
            failed.append("admitted/s below 90 % of the binding limit")
        per_decided = ours["writes_per_decided"]
        if per_decided is not None and per_decided > 1.5 * WARM_WRITES[row["shape"]]:
            failed.append("writes per decided call above 1.5 x the warm figure")
        if ours["late_p99_ms"] > ours["lag_max_ms"] + 50:
            failed.append("p99 lateness above the worst loop lag + 50 ms")
        if row["capped"] and row["shape"] == "org":
            if ours["rejected"] == 0:
                failed.append("no 429 where the organisation's limit refuses")
            if row["tasks"] == 32 and ours["unavailable"] > 0.05 * ours["calls"]:
                failed.append("503s above 5 % of calls")
    elif ours["past_deadline"]:
        failed.append("calls past the deadline")
    return failed


def section(result: dict[str, Any]) -> str:
    """The report's overload section: one line per row and implementation, then the verdicts."""
    header = (
        "| Row | who | admitted/s | 429 | 503 | writes / decided | p50 / p99 / max ms | past "
        "1 s (late p99 / max ms) | loop lag p99 / max ms | load |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|---|"]
    checks = []
    for entry in result["rows"]:
        row = entry["row"]
        for impl in ("ours", "theirs"):
            r = entry.get(impl)
            if r is None:
                continue
            lines.append(
                f"| {row['name'] if impl == 'ours' else ''} | {impl} | {r['admitted_per_s']} | "
                f"{r['rejected']} | {r['unavailable']} | {r['writes_per_decided']} | "
                f"{r['p50_ms']} / {r['p99_ms']} / {r['max_ms']} | {r['past_deadline']} "
                f"({r['late_p99_ms']} / {r['late_max_ms']}) | {r['lag_p99_ms']} / "
                f"{r['lag_max_ms']} | {r['load']:.1f} |"
            )
        failed = verdicts(entry)
        checks.append(f"- {row['name']}: " + ("passes" if not failed else "; ".join(failed)))
    intro = (
        "Each row and implementation on a DynamoDB Local of its own: every task calls in a loop "
        "(a 503 waits its 1 s Retry-After), ours and 0.17.0 alternated; `-capped` rows go "
        f"through a proxy that lets the table write {result['cap_per_second']} items a second "
        "and throttles the rest. "
        "Writes / decided: "
        "write requests on the wire the table did not throttle (it spent capacity on them) per "
        "call admitted or refused (429). Lateness is how long past "
        "its 1 s deadline a call was decided (0.17.0 has none: its figures are how long past 1 s); "
        "loop lag how late a 5 ms sleep woke in the same loop."
    )
    return "\n\n".join([intro, "\n".join(lines), "Acceptance:\n" + "\n".join(checks)])


def main() -> None:
    from benchmarks.run import IMPLS, ensure_theirs_venv, fresh_session

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=OVERLOAD_SECONDS)
    parser.add_argument("--quiet-seconds", type=float, default=QUIET_SECONDS)
    parser.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    wanted = {r for r in args.rows.split(",") if r}
    selected = [r for r in rows(args.seconds, args.quiet_seconds) if not wanted or r.name in wanted]
    impls = set(args.impls.split(","))
    with fresh_session(ensure_theirs_venv()) as (workers, _):
        chosen = {k: v for k, v in workers.items() if k in impls}
        result = bench_phase(chosen, selected)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(section(result))


if __name__ == "__main__":
    main()
