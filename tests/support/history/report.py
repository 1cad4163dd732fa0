"""A checked history as Markdown: settings, operations by outcome, faults by kind, verdicts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict

from support.history.checker import Checked
from support.history.runner import Ran, Run


def settings(run: Run) -> str:
    """Every setting of a run, as `name=value` pairs."""
    return ", ".join(f"{k}={v}" for k, v in asdict(run).items())


def counts(column: str, unit: str, counted: Mapping[str, int]) -> list[str]:
    """A two-column Markdown table of counts, sorted by name."""
    rows = (f"| {name} | {count} |" for name, count in sorted(counted.items()))
    return [f"| {column} | {unit} |", "|---|---:|", *rows]


def decided(checked: Checked) -> int:
    """Operations that ended with a decision (admitted or refused), from the table or a cache."""
    outcomes = checked.history.outcomes
    return outcomes["ok"] + outcomes["fail"]


def render(ran: Ran, checked: Checked, *, title: str) -> str:
    run, history = ran.run, checked.history
    outcomes = history.outcomes
    faults = history.faults
    lines = [
        f"# {title}",
        "",
        f"Seed {run.seed}; {len(ran.workers)} worker processes ({ran.kills} killed with SIGKILL "
        f"and replaced by new writers; {sum(w.late for w in ran.workers)} still settling "
        f"{run.grace_s:.0f} s after the end, killed then), {run.tasks} tasks each; "
        f"{ran.ended - ran.started:.0f} s; clock offsets "
        f"{sorted(w.offset_ms for w in ran.workers)} ms (spread {ran.skew_spread_ms} ms).",
        "",
        f"Settings: {settings(run)}.",
        "",
        f"## Operations: {sum(outcomes.values())}",
        "",
        *counts("Outcome", "Operations", outcomes),
        "",
        f"## Faults injected: {sum(faults.values())} "
        f"(of {history.total('requests')} requests through the proxies)",
        "",
        *counts("Kind", "Requests", faults),
        f"| processes killed | {ran.kills} |",
        "",
        f"Decisions: {decided(checked) - history.total('local_rejections')} reached the table, "
        f"{history.total('local_rejections')} were answered from the rejection cache without a "
        f"request, {sum(outcomes.values()) - decided(checked)} operations had none (their "
        "deadline passed, their caller was cancelled or their process killed: unknown); "
        f"{history.total('requests')} requests reached the proxies.",
        "",
        f"Undecided writes (every re-send lost, or the writer's entry removed): "
        f"{history.total('undecided')}, of them refunds of blocks that raised: "
        f"{sum(op.unrefunded for op in history.ops.values())}; writes without evidence "
        f"(their item full of young entries): {history.total('unkept')}; items seen "
        f"stamped too far ahead: {history.total('skewed')}; rejections answered from the "
        f"rejection cache (no request): {history.total('local_rejections')} (from the workers' "
        "last stats lines; a killed worker's counts are as of its last second).",
        "",
        "## Verdicts per bucket",
        "",
        "Consumption must lie in [ok, ok + unknown] (+ the credits of undecided refunds); "
        "*over* is the worst excess of what was admitted in a span over capacity + refill + "
        "credits (0: never over); *turns* is "
        "what ok operations admitted divided by capacity; a *leftover* on a refund-only "
        "entity shows the most that operations of killed processes could have left.",
        "",
        "| Bucket | Capacity | Turns | Over | Consumed | [ok, ok + unknown] | Ledger "
        "| Leftover | All-or-none gap |",
        "|---|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for v in checked.verdicts:
        leftover = ""
        if v.leftover is not None:
            verdict = "ok" if v.leftover_ok else "BAD"
            leftover = f"{v.leftover} {verdict} (kills: <= {v.killed_upper})"
        gap = "" if v.all_or_none_gap is None else str(v.all_or_none_gap)
        gap += "" if v.all_or_none_ok else " BAD"
        lines.append(
            f"| {v.bucket} | {v.capacity} | {v.turns:.1f} | {v.over:.2f} | {v.consumed} "
            f"| [{v.lower}, {v.upper}] | {'ok' if v.ledger_ok else 'BAD'} | {leftover} | {gap} |"
        )
    problems = checked.problems
    lines += ["", "## Result", ""]
    lines += [f"- {p}" for p in problems] if problems else ["No violations."]
    return "\n".join(lines) + "\n"
