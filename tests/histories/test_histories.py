"""A small recorded history, checked (tests/support/history/; docs/contributing.md).

Two worker processes of four tasks each, 12 operations a task (`soak.SMALL`): every fault kind, a
partition in each, one SIGKILL (its replacement is a new writer), clocks up to 500 ms apart,
limits reached many times over. Driven by operation counts, not the wall clock, so a loaded
machine runs the same history, only slower. The large run is `make soak` (docs/contributing.md).
"""

from __future__ import annotations

from pathlib import Path

from support.faultproxy import KINDS
from support.history.report import render
from support.history.soak import SMALL, history


async def test_a_small_history_has_no_violation(ddb_endpoint: str, tmp_path: Path) -> None:
    print(f"history seed {SMALL.seed}")
    ran, checked = await history(SMALL, ddb_endpoint, tmp_path)
    print(render(ran, checked, title="Small history"))
    outcomes, faults = checked.history.outcomes, checked.history.faults
    assert checked.problems == []
    assert ran.kills == 1 and outcomes["ok"] > 0 and outcomes["fail"] > 0  # limits reached
    assert all(faults[kind] > 0 for kind in (*KINDS, "partition")), faults
