"""A recorded history of concurrency holds under kills and faults (tests/support/history/,
docs/concurrency.md): processes hold and give back leases against a small max_in_flight, some
are SIGKILLed with leases open, every write may meet a fault; the checker counts what was
certainly held at every instant (hold_checker.py). The plans and the run are hold_runs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.faultproxy import KINDS
from support.history.hold_runs import CAP, HOLDS, PARTITIONED, hold_history, summary
from support.history.runner import Run


@pytest.mark.parametrize("run", [HOLDS, PARTITIONED], ids=["faults", "partitions"])
async def test_holds_never_exceed_max_in_flight_through_kills_and_faults(
    ddb_endpoint: str, tmp_path: Path, run: Run
) -> None:
    result = await hold_history(run, ddb_endpoint, tmp_path)
    checked = result.checked
    print(summary(result))
    assert result.errors == []
    assert checked.over == [] and checked.max_held == CAP  # the cap bound, and was reached
    assert result.ran.kills == run.kills and checked.outcomes["refused"] > 0
    assert checked.outcomes["open at kill"] > 0  # killed processes left holds behind
    assert all(checked.faults[kind] > 0 for kind in KINDS), checked.faults
    # Every entry a killed process left is gone from each write past its bound (an entry
    # with no write late enough to time it is freed when a new writer takes the cap after it).
    assert checked.recoveries and [r for r in checked.recoveries if r.late] == []
    assert (checked.partitions > 0) == (run.partitions > 0)
    # A new writer took the whole cap (a unit a call) once the holds left behind lapsed, and
    # nothing stays held on any shard
    assert result.attempts < 40
    assert (result.left_total, result.left_entries) == (0, 0)
    assert result.problems == []
