"""The simulation's plans: what a seed's history does (`drawn`), the CI slice, and shrinking a
failing plan to a short one printed as a test to paste (`shrink`, `as_test`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from support.history.workload import Limits
from support.sim.changes import CHANGES
from support.sim.network import KINDS, Faults
from support.sim.stream import Delivery
from support.sim.world import Plan, Simulated, simulate


def drawn(seed: int, *, brownouts: bool = True) -> Plan:
    """The plan of `seed` for `make sim`: its shape, limits and faults are drawn from the seed
    too, so that seeds explore different schedules. `brownouts`: throttling storms that spend
    the client's retry budget (off in the CI slice: see tests/sim/test_simulation.py)."""
    rng = random.Random(f"plan/{seed}")
    kinds = tuple(k for k in KINDS if rng.random() < 0.7) or KINDS
    return Plan(
        seed=seed,
        processes=rng.randint(2, 5),
        tasks=rng.randint(2, 8),
        ops=rng.randint(8, 30),
        hold_tasks=rng.choice((0, 1, 2)),
        limits=Limits(
            rpm=rng.choice((2, 4, 8, 20)), period_s=rng.choice((5, 10, 20)), alert_at=(50, 80, 100)
        ),
        hold_cap=rng.randint(1, 3),
        faults=Faults(rate=rng.choice((0.0, 0.05, 0.15, 0.3)), kinds=kinds),
        kills=rng.randint(0, 3),
        skew_ms=rng.choice((0, 100, 500, 1000)),
        partitions=rng.randint(0, 2),
        brownouts=rng.choice((0, 0, 1)) if brownouts else 0,
        cancel_rate=rng.choice((0.0, 0.02, 0.1)),
        pause_s=rng.choice((0.01, 0.05, 0.2)),
        acquire_timeout=rng.choice((None, 0.3, 1.0, 1.0)),
        rejection_cache_ttl=rng.choice((0.0, 0.2, 1.0)),
        # drawn after the fields above, so that a seed keeps the shape it had before them
        delivery=Delivery(
            shards=rng.choice((1, 1, 2)),
            batch=rng.choice((1, 10, 40, 100)),
            poll_s=rng.choice((0.2, 1.0, 3.0)),
            deaths=rng.choice((0.0, 0.05, 0.2)),
        ),
        changes=tuple(kind for kind in CHANGES if rng.random() < 0.3),
        split_writes_per_second=rng.choice((1000.0, 1000.0, 20.0, 4.0)),
    )


#: The CI slice's plans: `drawn` without brown-outs.
def ci(seed: int) -> Plan:
    return drawn(seed, brownouts=False)


PLANS: dict[str, Callable[[int], Plan]] = {"drawn": drawn, "ci": ci}


def _with(plan: Plan, name: str, value: object) -> Plan:
    changes: dict[str, Any] = {name: value}
    return replace(plan, **changes)


def _smaller(plan: Plan) -> list[Plan]:
    """Plans one step shorter or calmer than `plan`, most reducing first."""
    out: list[Plan] = []
    for name in ("processes", "tasks", "ops", "kills", "hold_tasks", "partitions", "brownouts"):
        value = getattr(plan, name)
        floor = 1 if name in ("processes", "ops") else 0
        for smaller in sorted({floor, value // 2, value - 1}):
            if floor <= smaller < value:
                out.append(_with(plan, name, smaller))
    for name, calm in (("cancel_rate", 0.0), ("skew_ms", 0)):
        if getattr(plan, name) != calm:
            out.append(_with(plan, name, calm))
    for kind in plan.changes:
        out.append(replace(plan, changes=tuple(k for k in plan.changes if k != kind)))
    if plan.split_writes_per_second != 1000.0:
        out.append(replace(plan, split_writes_per_second=1000.0))
    delivery = plan.delivery
    if delivery.shards > 1 or delivery.deaths:
        out.append(replace(plan, delivery=replace(delivery, shards=1, deaths=0.0)))
    faults = plan.faults
    for kind in faults.kinds:
        kinds = tuple(k for k in faults.kinds if k != kind)
        out.append(replace(plan, faults=replace(faults, kinds=kinds)))
    if faults.rate > 0:
        out.append(replace(plan, faults=replace(faults, rate=0.0)))
    return out


KINDS_OF_PROBLEM = (
    ("over its limit", "over-admission"),
    ("outside [", "ledger"),
    ("refund-only", "leftover"),
    ("all-or-none", "all-or-none"),
    ("instants over", "holds over the cap"),
    ("left held", "left held"),
    ("contended", "refusal"),
    ("undocumented error", "undocumented error"),
    ("loop:", "loop error"),
    ("only consumption that stays", "alert on a refunded debit"),
    ("the simulation raised", "simulation error"),
    ("snapshots counted", "usage snapshots"),
    ("alert", "alerts"),
)


def kinds(problems: list[str]) -> set[str]:
    """What kinds of violation `problems` are (shrinking keeps a plan that fails the same way)."""
    return {kind for problem in problems for mark, kind in KINDS_OF_PROBLEM if mark in problem}


def shrink(
    plan: Plan, fails: Callable[[Simulated], bool], budget: int = 80, seconds: float = 180.0
) -> Plan:
    """A plan as short as a greedy search finds that still `fails` (the same seed, fewer
    processes, tasks, operations, kills and fault kinds), within `budget` simulations and
    `seconds` of wall time (a bound on a busy machine, not part of the result's replay)."""
    tries = 0
    ends = time.monotonic() + seconds
    changed = True
    while changed and tries < budget and time.monotonic() < ends:
        changed = False
        for candidate in _smaller(plan):
            tries += 1
            if fails(simulate(candidate)):
                plan, changed = candidate, True
                break
            if tries >= budget or time.monotonic() >= ends:
                break
    return plan


def as_test(plan: Plan, name: str, problems: list[str]) -> str:
    """A test to paste into tests/sim/ that replays `plan` and fails while the bug is there."""
    args = []
    for field in fields(plan):
        value = getattr(plan, field.name)
        if value != field.default or field.name == "seed":
            args.append(f"{field.name}={value!r}")
    lines = [
        "from support.history.workload import Limits",
        "from support.sim.network import Faults",
        "from support.sim.stream import Delivery",
        "from support.sim.world import Plan, simulate",
        "",
        "",
        f"def test_{name}() -> None:",
        f"    # found: {problems[0][:200]}" if problems else "    # found by make sim",
        f"    plan = Plan({', '.join(args)})",
        "    assert simulate(plan).problems == []",
    ]
    return "\n".join(lines)
