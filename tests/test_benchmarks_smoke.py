"""The benchmark's workloads still run against our library (a smoke test, a few seconds).

The benchmark itself (`python -m benchmarks.run`, docs/performance.md) is never part of the test
suite; this only runs its scenario code for ours, tiny, on the module's DynamoDB Local, so that
a change to the library or to the wire recorder cannot silently break `make bench`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import scenarios  # noqa: E402
from benchmarks.impls import Ours  # noqa: E402
from benchmarks.targets import COST_ROWS  # noqa: E402

pytestmark = pytest.mark.ddb


async def test_cost_rows_are_all_measured(ddb_endpoint: str, wire: Any) -> None:
    rows = await scenarios.all_costs(Ours(ddb_endpoint), wire)
    assert not [key for key in rows if key.endswith("setup_error")], rows
    for row in COST_ROWS:
        assert rows[row.id]["outcome"] == row.outcome, (row.id, rows[row.id])


async def test_timing_and_floor_blocks_run(ddb_endpoint: str, wire: Any) -> None:
    bench = scenarios.TimingBench(Ours(ddb_endpoint))
    try:
        await bench.setup(warm_rounds=1)
        floor = await bench.setup_floor(wire)
        assert floor["single"]["replayed_update_items"] == 1
        assert floor["three"]["replayed_update_items"] == 3
        for case in scenarios.TIMING_CASES:
            sample = await bench.block(case, 3)
            assert sample["outcomes"] == {"ok": 3} and len(sample["lat_us"]) == 3
            assert len((await bench.floor_block(case, 2))["lat_us"]) == 2
    finally:
        await bench.close()


@pytest.mark.parametrize("kind", scenarios.CONTENTION_KINDS)
async def test_contention_never_over_admits(ddb_endpoint: str, wire: Any, kind: str) -> None:
    result = await scenarios.contention(
        Ours(ddb_endpoint), wire, kind, tasks=6, attempts=5, capacity=4
    )
    assert result["errors"] == {}
    assert result["over_admitted"] == 0
    assert result["admitted"] == result["allowed"]


def test_the_cron_edge_benchmark_measures_every_shape() -> None:
    from benchmarks import cron_edges

    results = cron_edges.measure(n=5)
    assert set(results) == {label for label, _, _ in cron_edges.SHAPES}
    for row in results.values():
        assert {"next_edge", "last_edge", "cached", "window_change"} <= set(row)


def test_the_outage_phase_names_the_rows_above_the_deadline() -> None:
    from benchmarks import outage, run

    assert "outage" in run.ALL_PHASES
    row = {
        "shape": "hold",
        "timeout_s": 0.2,
        "mode": "BLOCK",
        "p50_ms": 201.0,
        "p99_ms": 249.0,
        "max_ms": 251.0,
        "exit_max_ms": None,
        "outcomes": {"refused": 40},
        "left_units": 0,
        "resolved_after_deadline": 40,
        "refunded_after_deadline": 1,
        "late_p99_ms": 49.0,
        "lag_p99_ms": 3.0,
        "lag_max_ms": 48.0,
    }
    late = {**row, "shape": "stopped", "p99_ms": 251.0, "late_p99_ms": 51.0}
    missed = outage.missed([row, late])
    assert missed == [late]
    theirs = {"shape": "hold", "mode": "BLOCK", "p50_ms": 60001.0, "p99_ms": 60002.0}
    theirs |= {"lag_p99_ms": 2.0, "lag_max_ms": 9.0, "exit_max_ms": None}
    theirs["outcomes"] = {"held past the 60 s cap": 8}
    text = outage.section(
        {
            "calls": 40,
            "load_before": 1.0,
            "rows": [row, late],
            "missed": missed,
            "theirs": [theirs],
            "theirs_cap_s": 60.0,
        }
    )
    assert "p99 above the deadline + 50 ms in stopped 0.2 s BLOCK" in text
    assert "| hold | 0.2 s | BLOCK | 201.0 | 249.0 | 251.0 | 49.0 | 3.0 / 48.0 |" in text
    held = "| hold | BLOCK | 60001.0 | 60002.0 | 2.0 / 9.0 | None | held past the 60 s cap 8 |"
    assert held in text


def test_the_outage_callers_report_lateness_and_loop_lag() -> None:
    from benchmarks.outage_calls import summary

    raw = {
        "entered": [0.2005, 0.2010, 0.2600],
        "exited": [],
        "outcomes": {"refused": 3},
        "lags": [0.001, 0.002, 0.030],
    }
    row = summary(raw, 0.2)
    assert (row["p99_ms"], row["late_p99_ms"]) == (260.0, 60.0)
    assert (row["lag_p99_ms"], row["lag_max_ms"], row["exit_max_ms"]) == (30.0, 30.0, None)


def test_the_concurrency_phase_alternates_and_asserts_one_write_each_way() -> None:
    from benchmarks import concurrency_cpu, run

    assert "concurrency" in run.ALL_PHASES
    result = concurrency_cpu.bench_phase(rounds=2, calls=10)
    assert result["per_call"] == {k: {"requests": 2.0, "wcu": 2.0} for k in ("rate", "held")}
    assert [len(result["cpu_us"][k]) for k in ("rate", "held")] == [2, 2]
    text = concurrency_cpu.section({**result, "median_ratio": 1.2})
    assert "1.200 x the client CPU" in text and "NOT within 5 %" in text


def test_the_regions_phase_is_run_and_reported() -> None:
    """The phase itself runs in `make bench` (three simulated Regions, minutes); here only that
    it is one of the phases and that its section reads its results."""
    from benchmarks import regions, run

    assert "regions" in run.ALL_PHASES
    row = {
        "p50_ms": 17.5,
        "p99_ms": 30.1,
        "requests_per_call": 1.0,
        "wcu_per_call": 1.0,
        "replicated_write_units_per_call": 2.0,
        "simulated_second_region_ms": 15.0,
    }
    text = regions.section(
        {
            "latency": {"us-east-1": row},
            "conflicts": {
                "without": {"per_1000_calls": 900.0, "conflicts": 90, "calls": 100, "shards": 1},
                "with": {"per_1000_calls": 0.0, "conflicts": 0, "calls": 100, "shards": 4},
            },
            "transfers": {
                "quota": 100,
                "calls": 150,
                "transfers": 3,
                "per_1000_calls": 20.0,
                "admitted": 100,
            },
            "transactions": 0,
            "rtt_ms": {"us-east-1 - us-east-2": 15.0},
        }
    )
    assert "| us-east-1 | 17.5 | 30.1 | 15.0 | 1.00 | 1.00 | 2.00 |" in text
    assert "0.0 per 1,000 with them" in text and "Transactions sent: 0" in text


async def test_the_fleet_phase_measures_every_kind_and_renders(
    ddb_endpoint: str, wire: Any
) -> None:
    from benchmarks import fleet, run

    assert "fleet" in run.ALL_PHASES
    result = await fleet.fleet(
        Ours(ddb_endpoint), wire, levels=(2,), modes=("at_once",), loop_writers=2, loop_rounds=1
    )
    [level] = result["levels"]
    assert (level["writers"], level["mode"]) == (2, "at_once")
    assert {call["warm"]["outcome"] for call in level["calls"].values()} == {"admitted"}
    assert level["calls"]["rate/cascade"]["warm"]["wcu"] == 2
    assert result["loop"]["errors"] == 0 and result["loop"]["calls"] == 2
    text = fleet.section({"ours": result, "theirs": {"error": "not run"}})
    assert "| 2 | at once | ours |" in text and "error: not run" in text


def _overload_side(admitted_per_s: float, **more: Any) -> dict[str, Any]:
    side = {
        "admitted_per_s": admitted_per_s,
        "admitted": int(admitted_per_s * 15),
        "rejected": 900,
        "unavailable": 10,
        "calls": 1_000,
        "wall_s": 15.0,
        "writes_per_decided": 0.5,
        "p50_ms": 2.0,
        "p99_ms": 900.0,
        "max_ms": 1_020.0,
        "past_deadline": 2,
        "late_p99_ms": 0.0,
        "late_max_ms": 20.0,
        "lag_p99_ms": 30.0,
        "lag_max_ms": 80.0,
        "load": 1.0,
    }
    return side | more


def test_the_overload_phase_judges_every_row() -> None:
    from benchmarks import overload, run

    assert "overload" in run.ALL_PHASES
    names = [row.name for row in overload.rows()]
    assert {"org32", "org128-capped", "hot32", "distinct-single", "one_user-three"} <= set(names)
    row = next(r for r in overload.rows() if r.name == "org32-capped").__dict__
    good = {"row": row, "ours": _overload_side(8.0), "theirs": _overload_side(6.5)}
    assert overload.verdicts(good) == []
    bad = {
        "row": row,
        "ours": _overload_side(5.0, rejected=0, unavailable=100, writes_per_decided=9.0),
        "theirs": _overload_side(6.5),
    }
    assert overload.verdicts(bad) == [
        "admitted/s below 0.17.0's",
        "admitted/s below 90 % of the binding limit",
        "writes per decided call above 1.5 x the warm figure",
        "no 429 where the organisation's limit refuses",
        "503s above 5 % of calls",
    ]
    quiet = next(r for r in overload.rows() if r.name == "distinct-single").__dict__
    late = {"row": quiet, "ours": _overload_side(90.0), "theirs": _overload_side(60.0)}
    assert overload.verdicts(late) == ["calls past the deadline"]
    text = overload.section({"rows": [good, late], "cap_per_second": 30})
    assert "- org32-capped: passes" in text and "- distinct-single: calls past the deadline" in text


async def test_the_overload_callers_run_on_ours(ddb_endpoint: str, wire: Any) -> None:
    from benchmarks.overload_calls import Side

    side = Side()
    try:
        await side.setup("ours", ddb_endpoint, ddb_endpoint, "org", "", 4)
        row = await side.run(0.5, wire)
    finally:
        await side.close()
    assert row["errors"] == {} and row["admitted"] > 0
    assert row["stats"]["decided_calls"] == row["admitted"] + row["rejected"]
    assert row["write_requests"] >= row["admitted"] * 2  # a user's two items, the parent's folded
