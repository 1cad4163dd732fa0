"""The scale phases' workloads still run against our library (a smoke test, tiny sizes).

Like tests/test_benchmarks_smoke.py: the benchmark is never part of the suite; this runs each
scale workload (benchmarks/scale.py, benchmarks/scale_ours.py) for ours on the module's
DynamoDB Local and checks the counts each one reports.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import scale, scale_ours  # noqa: E402
from benchmarks.impls import Ours  # noqa: E402

pytestmark = pytest.mark.ddb


@pytest.mark.parametrize("count", [1, 4])
async def test_resources_per_call_is_one_round_trip(
    ddb_endpoint: str, wire: Any, count: int
) -> None:
    row = await scale.resources_per_call(Ours(ddb_endpoint), wire, count=count, calls=3)
    assert (row["round_trips"], row["requests"], row["wcu"]) == (1, count, count)
    assert row["outcomes"] == {"ok": 3}


async def test_entities_growth_reports_cold_and_warm_costs(ddb_endpoint: str, wire: Any) -> None:
    rows = await scale.entities_growth(
        Ours(ddb_endpoint), wire, levels=[3, 12], sample=6, concurrency=4
    )
    assert [(r["entities"], r["new"]) for r in rows] == [(3, 3), (12, 9)]
    for row in rows:
        assert row["cold_errors"] == {}
        assert row["warm_requests_per_call"] == 1 and row["warm_wcu_per_call"] == 1
        assert row["cold_requests_per_entity"] > 1


@pytest.mark.parametrize("kind", scale.SHARED_KINDS)
async def test_a_shared_run_never_over_admits(ddb_endpoint: str, wire: Any, kind: str) -> None:
    impl = Ours(ddb_endpoint)
    setup = await scale.shared_setup(impl, kind=kind, processes=2, tasks=3, org_cap=20)
    parts = [
        await scale.shared_run(
            impl,
            wire,
            kind=kind,
            table=setup["table"],
            process=p,
            tasks=3,
            seconds=0.3,
            start_at=time.time(),
        )
        for p in range(2)
    ]
    row = scale.merge_shared(kind, setup, parts, seconds=0.3)
    assert row["errors"] == {} and row["over_admitted"] == 0
    if kind == "hot_org":
        assert 0 < row["admitted_with_warmup"] <= 20  # never above the cap (time may not reach it)


async def test_an_aggregator_batch_replayed_changes_nothing(ddb_endpoint: str, wire: Any) -> None:
    [row] = await scale_ours.aggregator_batches(ddb_endpoint, wire, sizes=(30,))
    assert row["batch"] == 30 and row["expected"]
    # Each record counted once, however many deliveries it took: a record that failed (an
    # engine too slow to answer) is delivered again, and a transaction whose answer was lost
    # finds its own markers then (a duplicate).
    first, replay = row["first"], row["replay"]
    assert first["failures"] == 0, first
    assert first["counted"] == row["expected"], first
    assert 0 < first["applied"] <= 30 and first["snapshot_writes"] > 0
    # The same batch again: every record is a duplicate and nothing more is counted.
    assert (replay["applied"], replay["duplicates"], replay["failures"]) == (0, 30, 0)
    assert replay["counted"] == row["expected"], replay


async def test_a_manifest_applies_then_plans_with_reads_only(ddb_endpoint: str, wire: Any) -> None:
    row = await scale_ours.manifest_apply(ddb_endpoint, wire, entities=4)
    assert row["changes_applied"] == 3 + 4 + 4 * 3  # resources, entities, entity levels
    assert row["plan_changes"] == 0 and row["plan"]["writes"] == 0 and row["plan"]["wcu"] == 0
    assert row["apply"]["wcu"] > 0
