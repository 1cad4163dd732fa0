"""The cost rows the benchmark measures and the spec's figure for each (reference.md §6).

A target is a bound per metric: ("==", x) or ("<=", x) ("≈" in the spec is read as "at most",
as tests/behaviour/test_costs.py does). `wcu` is table plus indexes, with failed conditional writes
at 1 WCU and transactions at 2 WCU per item (tests/support/wire.py counts it that way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WCU_PRICE_PER_MILLION_USD = 0.625
RCU_PRICE_PER_MILLION_USD = 0.125

Bound = tuple[str, float]


@dataclass(frozen=True)
class CostRow:
    id: str
    title: str
    #: "000" / "001" for rows of the seed pages' tables, "" for reference.md's other operations
    seed: str
    target: dict[str, Bound] = field(default_factory=dict)
    #: what the call must do for its cost to mean anything: "admitted", "rejected" or "exit"
    outcome: str = "admitted"


def exact(rt: int, rcu: float, wcu: float) -> dict[str, Bound]:
    return {
        "round_trips": ("==", rt),
        "rcu": ("==", rcu),
        "wcu": ("==", wcu),
        "index_wcu": ("==", 0),
    }


COST_ROWS: tuple[CostRow, ...] = (
    CostRow(
        "seed.first",
        "Seed: first acquire of the entity (every resource on the slow path)",
        "000",
        {"round_trips": ("<=", 4), "rcu": ("<=", 10), "wcu": ("<=", 12)},
    ),
    CostRow(
        "seed.admit",
        "Seed: all admitted (search cascades to the org, budget per user)",
        "000",
        exact(1, 0, 3),
    ),
    CostRow(
        "seed.reconcile",
        "Seed: exit reconcile, every resource adjusted",
        "000",
        exact(1, 0, 3),
        "exit",
    ),
    CostRow("seed.exact", "Seed: estimate exact, no adjust (admit + exit)", "001", exact(1, 0, 3)),
    CostRow(
        "seed.reject_cached",
        "Seed: rejected, and the rejection cache already knows",
        "000",
        exact(0, 0, 0),
        "rejected",
    ),
    CostRow(
        "seed.reject_cold",
        "Seed: `budget` rejected, cache cold",
        "000",
        exact(2, 0, 3 + 2),
        "rejected",
    ),
    CostRow(
        "org.admit", "Seed: admit with a real-time organisation budget cap", "001", exact(1, 0, 4)
    ),
    CostRow(
        "org.reconcile",
        "Seed: reconcile with a real-time organisation budget cap",
        "001",
        exact(1, 0, 4),
        "exit",
    ),
    CostRow("single.first", "Single resource: first acquire", "", {"round_trips": ("<=", 4)}),
    CostRow(
        "single.admit", "Single resource: warm admit (enter + exit), no cascade", "", exact(1, 0, 1)
    ),
    CostRow(
        "single.cascade_admit",
        "Single resource: warm admit with a cascade parent",
        "",
        exact(1, 0, 2),
    ),
    CostRow(
        "single.reconcile", "Single resource: exit after `adjust()`", "", exact(1, 0, 1), "exit"
    ),
    CostRow(
        "single.no_change", "Single resource: exit with no net change", "", exact(0, 0, 0), "exit"
    ),
    CostRow("single.refund", "Single resource: refund on exception", "", exact(1, 0, 1), "exit"),
    CostRow("single.consume", "Single resource: `lease.consume()`", "", exact(1, 0, 1), "exit"),
    CostRow(
        "single.reject_cold",
        "Single resource: rejection, cache cold",
        "",
        exact(1, 0, 1),
        "rejected",
    ),
)

ROWS_BY_ID = {row.id: row for row in COST_ROWS}

#: Seed page 001's per-call table: (title, rows whose WCU add up to the call's total)
PER_MILLION_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Resource cascades, budget per user (admit + reconcile)", ("seed.admit", "seed.reconcile")),
    ("…with a real-time organisation budget cap", ("org.admit", "org.reconcile")),
    ("…when the estimate was exact (no adjust)", ("seed.exact",)),
)


def check(target: dict[str, Bound], measured: dict[str, Any]) -> bool:
    """True when every bounded metric of `measured` is within its target."""
    for metric, (op, value) in target.items():
        got = measured.get(metric)
        if got is None:
            return False
        if op == "==" and abs(float(got) - value) > 1e-9:
            return False
        if op == "<=" and float(got) > value + 1e-9:
            return False
    return True


def describe(target: dict[str, Bound], metric: str) -> str:
    if metric not in target:
        return "–"
    op, value = target[metric]
    shown = f"{value:g}"
    return shown if op == "==" else f"≤ {shown}"
