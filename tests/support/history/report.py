"""A checked history as Markdown: settings, operations by outcome, faults by kind, verdicts."""

from __future__ import annotations

from dataclasses import asdict

from support.history.checker import Checked
from support.history.runner import Ran


def render(ran: Ran, checked: Checked, *, title: str) -> str:
    run, history = ran.run, checked.history
    settings = ", ".join(f"{k}={v}" for k, v in asdict(run).items())
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
        f"Settings: {settings}.",
        "",
        f"## Operations: {sum(outcomes.values())}",
        "",
        "| Outcome | Operations |",
        "|---|---:|",
        *(f"| {name} | {count} |" for name, count in sorted(outcomes.items())),
        "",
        f"## Faults injected: {sum(faults.values())} "
        f"(of {history.total('requests')} requests through the proxies)",
        "",
        "| Kind | Requests |",
        "|---|---:|",
        *(f"| {kind} | {count} |" for kind, count in sorted(faults.items())),
        f"| processes killed | {ran.kills} |",
        "",
        f"Undecided writes (every re-send lost): {history.total('undecided')}; items seen "
        f"stamped too far ahead: {history.total('skewed')}; rejections answered from the "
        f"rejection cache (no request): {history.total('local_rejections')} (from the workers' "
        "last stats lines; a killed worker's counts are as of its last second).",
        "",
        "## Verdicts per bucket",
        "",
        "Consumption must lie in [ok, ok + unknown]; *over* is the worst excess of what was "
        "admitted in a span over capacity + refill + credits (0: never over); *turns* is "
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
