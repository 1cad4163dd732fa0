"""A small recorded history across three simulated Regions (tests/support/history/
region_runs.py; docs/multi-region.md): a process in each Region, every fault kind, a partition
in each, one SIGKILL, clocks up to 500 ms apart, a global budget, one Region cut off for a
while; the checker finds no violation and no transaction was sent. The large run is
`make soak SOAK_ARGS=--regions`."""

from __future__ import annotations

from pathlib import Path

from support.faultproxy import KINDS
from support.history.region_runs import SMALL_REGIONS, region_history, render_regions


async def test_a_small_history_across_three_regions_has_no_violation(
    ddb_endpoint: str, tmp_path: Path
) -> None:
    print(f"history seed {SMALL_REGIONS.seed}")
    result = await region_history(SMALL_REGIONS, ddb_endpoint, tmp_path, scale=0.2, cut_s=2.0)
    print(render_regions(result, title="Small history across three Regions"))
    outcomes, faults = result.checked.history.outcomes, result.checked.history.faults
    assert result.problems == []
    assert result.ran.kills == 1 and outcomes["ok"] > 0 and outcomes["fail"] > 0
    assert all(faults[kind] > 0 for kind in (*KINDS, "partition")), faults
    assert sum(c["transaction"] for c in result.counts.values()) == 0
