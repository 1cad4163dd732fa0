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
from support.history.soak import SMALL, SMALL_CHURN, history


async def test_a_small_history_has_no_violation(ddb_endpoint: str, tmp_path: Path) -> None:
    print(f"history seed {SMALL.seed}")
    ran, checked = await history(SMALL, ddb_endpoint, tmp_path)
    print(render(ran, checked, title="Small history"))
    outcomes, faults = checked.history.outcomes, checked.history.faults
    assert checked.problems == []
    assert ran.kills == 1 and outcomes["ok"] > 0 and outcomes["fail"] > 0  # limits reached
    assert all(faults[kind] > 0 for kind in (*KINDS, "partition")), faults


async def test_a_history_where_writers_come_and_go_has_no_violation(
    ddb_endpoint: str, tmp_path: Path
) -> None:
    """`soak.SMALL_CHURN`: processes started and stopped throughout, as Lambda containers are,
    on items that keep few entries: entries removed to make room, writes without evidence."""
    print(f"history seed {SMALL_CHURN.seed}")
    ran, checked = await history(SMALL_CHURN, ddb_endpoint, tmp_path)
    print(render(ran, checked, title="Writers coming and going"))
    assert checked.problems == []
    writers = len(ran.workers)
    assert writers >= SMALL_CHURN.processes * SMALL_CHURN.generations  # each a new writer
    assert checked.history.outcomes["ok"] > 0
    assert checked.history.total("unkept") > 0  # items full of young entries were met
