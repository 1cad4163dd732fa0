"""The report's "How cost grows" sections: a table and a plot per scale phase."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import breakdown
from benchmarks.report import WHO_LABEL, mark, ms, num, table

IMPLS = ("ours", "theirs")
COLOURS = {"ours": "tab:blue", "theirs": "tab:orange"}
NO_AGGREGATOR = (
    "0.17.0 is not measured: its aggregator is a Lambda of its own stack, fed by "
    "the stream there, not a library call that can run on DynamoDB Local's stream; "
    "the figures would not be comparable."
)
NO_MANIFEST = "0.17.0 is not measured: it has no manifest (`limits apply`/`plan`)."


def _cell(row: dict[str, Any] | None, key: str, digits: int = 0) -> str:
    if not row or "error" in row:
        return "error" if row else "–"
    value = row.get(key)
    if value is not None and key.endswith("_us") and key != "cpu_us_per_call":
        return ms(float(value))
    return num(value, digits)


def resources_section(data: dict[str, Any]) -> str:
    rows = []
    for count, row in data.items():
        for impl in IMPLS:
            r = row.get(impl)
            rows.append(
                [
                    count if impl == "ours" else "",
                    WHO_LABEL[impl],
                    _cell(r, "round_trips"),
                    _cell(r, "requests"),
                    _cell(r, "wcu", 1),
                    _cell(r, "cpu_us_per_call"),
                    _cell(r, "p50_us"),
                    _cell(r, "p99_us"),
                ]
            )
            if r and "error" in r:
                rows[-1].append(r["error"][:120])
    return table(
        [
            "resources per call",
            "who",
            "round trips",
            "requests",
            "WCU",
            "client CPU µs/call",
            "p50 ms",
            "p99 ms",
        ],
        rows,
    ) + (
        "\n\nOne acquire: the first resource named, the others in `also`, one limit each "
        "(unreachable), warm, sequential; round trips, requests and WCU of one call, CPU and "
        "latency over the timed calls."
    )


def entities_section(data: dict[str, Any]) -> str:
    rows = []
    for impl in IMPLS:
        for r in data.get(impl, []):
            rows.append(
                [
                    WHO_LABEL[impl],
                    num(r["entities"]),
                    num(r["new"]),
                    num(r["cold_requests_per_entity"], 2),
                    num(r["cold_wcu_per_entity"], 2),
                    num(r["cold_rcu_per_entity"], 2),
                    num(r["cold_cpu_us_per_entity"]),
                    num(r["warm_requests_per_call"], 2),
                    num(r["warm_wcu_per_call"], 2),
                    num(r["warm_rcu_per_call"], 2),
                    ms(r["warm_p50_us"]),
                    num(r["warm_cpu_us_per_call"]),
                ]
            )
    return table(
        [
            "who",
            "entities met",
            "new",
            "cold req/entity",
            "cold WCU/entity",
            "cold RCU/entity",
            "cold CPU µs/entity",
            "warm req/call",
            "warm WCU/call",
            "warm RCU/call",
            "warm p50 ms",
            "warm CPU µs/call",
        ],
        rows,
    ) + (
        "\n\nEach step meets its new entities for the first time (16 tasks at once), then "
        "makes one warm call each on a sample of every entity met so far. 0.17.0 stops at "
        "fewer entities where its cold start would take too long for the benchmark's budget."
    )


def shared_section(data: dict[str, Any], *, by_processes: bool) -> str:
    rows = []
    items = (
        data.items()
        if by_processes
        else [(str(next(iter(data.values())).get("processes", "")), data)]
    )
    for processes, row in items:
        for impl in IMPLS:
            r = row.get(impl) or {}
            rows.append(
                [
                    processes if impl == "ours" else "",
                    WHO_LABEL[impl],
                    num(r.get("calls")),
                    num(r.get("admitted")),
                    num(r.get("admitted_with_warmup", r.get("admitted"))),
                    str(r.get("allowed", "–"))
                    if isinstance(r.get("allowed"), str)
                    else num(r.get("allowed")),
                    f"**{r['over_admitted']}**" if r.get("over_admitted") else "0",
                    ", ".join(f"{k} {v}" for k, v in r.get("errors", {}).items()) or "0",
                    num(r.get("admitted_per_s")),
                    ms(r.get("p50_us", float("nan"))),
                    ms(r.get("p99_us", float("nan"))),
                    num(r.get("wcu_per_admitted"), 2),
                    num(r.get("shards")) if "shards" in r else "–",
                ]
            )
    return table(
        [
            "processes",
            "who",
            "calls",
            "admitted",
            "admitted (with warm-up)",
            "allowed",
            "over-admitted",
            "errors",
            "admitted/s",
            "p50 ms",
            "p99 ms",
            "WCU/admitted",
            "shards after",
        ],
        rows,
    )


def _yes(counted: Any, expected: Any) -> str:
    if counted is None or expected is None:
        return "–"  # a result file from before this column
    return "yes" if counted == expected else f"**no**: {counted} for {expected}"


def aggregator_section(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        for attempt in ("first", "replay"):
            r = row[attempt]
            lines.append(
                [
                    num(row["batch"]) if attempt == "first" else "",
                    "first delivery" if attempt == "first" else "replay (same batch)",
                    num(r.get("deliveries", 1)),
                    num(r["applied"]),
                    num(r["duplicates"]),
                    _yes(r.get("counted"), row.get("expected")),
                    num(r["records_per_s"]),
                    f"{num(r['transactions'])} ({num(r.get('cancelled_transactions'))} cancelled)",
                    num(r["snapshot_writes"]),
                    num(r["snapshot_writes_per_record"], 2),
                    num(r["wcu_per_record"], 2),
                    num(r["failures"]),
                ]
            )
    return table(
        [
            "batch",
            "delivery",
            "invocations",
            "applied",
            "duplicates",
            "counted as the records say",
            "records/s",
            "transactions",
            "snapshot writes",
            "snapshot writes/record",
            "WCU/record",
            "failures",
        ],
        lines,
    ) + (
        "\n\nOne `Aggregator.process` call per batch (one Lambda invocation); when "
        "records fail (an engine too slow to answer), the batch is delivered again from the "
        "first failed record, as Lambda does with ReportBatchItemFailures, and `invocations` "
        "counts the deliveries. `counted as the records say`: the resource's snapshot totals "
        "grew by exactly what the batch's records debited. "
        "Records of 50 entities, default windows. Snapshot writes count the "
        "updates of applied transactions; a replay's transactions are "
        "cancelled by the records' markers (0 changes), and a cancelled "
        "transaction is still billed its items' WCU. " + NO_AGGREGATOR
    )


def manifest_sections(rows: list[dict[str, Any]]) -> str:
    return "\n\n".join(manifest_section(row) for row in rows)


def manifest_section(data: dict[str, Any]) -> str:
    if "error" in data:
        r = data["apply"]
        return (
            f"{num(data['entities'])} entities × {data['resources']} resources: **the apply "
            f"failed** after {num(r['requests'])} requests ({num(r['wcu'], 0)} WCU, "
            f"{r['wall_s']:.0f} s): {data['error']}. " + NO_MANIFEST
        )
    rows = []
    for label, key in (("apply (fresh table)", "apply"), ("plan, nothing changed", "plan")):
        r = data[key]
        rows.append(
            [
                label,
                num(r["requests"]),
                num(r["reads"]),
                num(r["writes"]),
                num(r["rcu"], 1),
                num(r["wcu"], 1),
                ", ".join(
                    f"{op} {num(w, 0)}" for op, w in r.get("wcu_by_operation", {}).items() if w
                )
                or "–",
                num(r.get("largest_write_wcu"), 0),
                f"{r['wall_s']:.1f}",
            ]
        )
    return table(
        [
            "step",
            "requests",
            "reads",
            "writes",
            "RCU",
            "WCU",
            "WCU by operation",
            "largest write (WCU)",
            "seconds",
        ],
        rows,
    ) + (
        f"\n\n{num(data['entities'])} entities × {data['resources']} resources: "
        f"{num(data['changes_applied'])} changes applied; the plan that followed found "
        f"{data['plan_changes']} to make ({num(data['plan_unchanged'])} unchanged): "
        f"{mark(data['plan_changes'] == 0 and data['plan']['writes'] == 0)} reads only. "
        + NO_MANIFEST
    )


SECTIONS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "breakdown": ("Where a warm call's time goes: client, wire, engine", breakdown.section),
    "resources": ("Resources per call", resources_section),
    "entities": ("Entities: cold start per new entity, warm cost as they grow", entities_section),
    "hot_procs": (
        "One hot item: processes × tasks, far below its limit",
        lambda d: shared_section(d, by_processes=True),
    ),
    "hot_org": (
        "A hot organisation: users across processes under one cap",
        lambda d: shared_section(d, by_processes=False),
    ),
    "aggregator": ("Aggregator: records per invocation", aggregator_section),
    "manifest": ("`limits apply` of a large manifest, then a no-change plan", manifest_sections),
}


def sections(results: dict[str, Any], plots: dict[str, str]) -> list[str]:
    parts: list[str] = []
    plan = results["meta"].get("scale_plan")
    if plan and any(phase in results for phase in SECTIONS):
        parts += [
            "## How cost grows: the plan",
            ", ".join(f"{k} {v}" for k, v in plan.items())
            + ". One worker process per process of a shared run, all started at the "
            "same wall-clock moment; ours and 0.17.0 alternate who goes first.",
        ]
    for phase, (title, render) in SECTIONS.items():
        if phase in results:
            parts += [f"## How cost grows: {title}", render(results[phase])]
            if phase in plots:
                parts.append(f"![{title}]({plots[phase]})")
    return parts


# --- plots -----------------------------------------------------------------------------------


def _series(data: dict[str, Any], impl: str, key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for x, row in data.items():
        r = row.get(impl)
        if r and "error" not in r and r.get(key) is not None:
            xs.append(float(x))
            ys.append(float(r[key]))
    return xs, ys


def _panels(
    path: Path,
    title: str,
    panels: list[tuple[str, dict[str, tuple[list[float], list[float]]], str, bool]],
) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for axis, (ylabel, lines, xlabel, logx) in zip(axes[0], panels, strict=True):
        for who, (xs, ys) in lines.items():
            if xs:
                axis.plot(
                    xs,
                    ys,
                    marker="o",
                    color=COLOURS.get(who, "tab:green"),
                    label=WHO_LABEL.get(who, who),
                )
        if logx:
            axis.set_xscale("log")
        axis.set_xlabel(xlabel)
        axis.set_ylabel(ylabel)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _by_impl(
    data: dict[str, Any], key: str, scale: float = 1.0
) -> dict[str, tuple[list[float], list[float]]]:
    out = {}
    for impl in IMPLS:
        xs, ys = _series(data, impl, key)
        out[impl] = (xs, [y * scale for y in ys])
    return out


def plot_all(results: dict[str, Any], stem_path: Path) -> dict[str, Path]:
    """One PNG per scale phase present: `<stem>-<phase>.png`. {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
    except ImportError:
        return {}
    date = results["meta"]["date"]
    plots: dict[str, Path] = {}

    def target(phase: str) -> Path:
        plots[phase] = stem_path.with_name(f"{stem_path.name}-{phase}.png")
        return plots[phase]

    if "breakdown" in results:
        breakdown.plot(
            results["breakdown"],
            target("breakdown"),
            f"Warm calls through a recording proxy — {date}",
        )
    if "resources" in results:
        d = results["resources"]
        _panels(
            target("resources"),
            f"Resources per call — {date}",
            [
                ("WCU per call", _by_impl(d, "wcu"), "resources per call", True),
                (
                    "client CPU µs per call",
                    _by_impl(d, "cpu_us_per_call"),
                    "resources per call",
                    True,
                ),
                ("p50 ms", _by_impl(d, "p50_us", 1e-3), "resources per call", True),
            ],
        )
    if "entities" in results:
        d = {
            impl: {str(r["entities"]): {impl: r} for r in rows}
            for impl, rows in results["entities"].items()
        }

        def line(key: str) -> dict[str, tuple[list[float], list[float]]]:
            return {impl: _series(d.get(impl, {}), impl, key) for impl in IMPLS}

        _panels(
            target("entities"),
            f"Entities met — {date}",
            [
                (
                    "cold requests per new entity",
                    line("cold_requests_per_entity"),
                    "entities",
                    True,
                ),
                ("warm requests per call", line("warm_requests_per_call"), "entities", True),
                ("warm p50 µs", line("warm_p50_us"), "entities", True),
            ],
        )
    if "hot_procs" in results:
        d = results["hot_procs"]
        _panels(
            target("hot_procs"),
            f"One hot item, processes × tasks — {date}",
            [
                ("admitted/s", _by_impl(d, "admitted_per_s"), "processes", False),
                ("p99 ms", _by_impl(d, "p99_us", 1e-3), "processes", False),
                ("WCU per admitted call", _by_impl(d, "wcu_per_admitted"), "processes", False),
            ],
        )
    if "hot_org" in results:
        _bars(
            target("hot_org"),
            f"Hot organisation, users across processes — {date}",
            results["hot_org"],
        )
    if "aggregator" in results:
        rows = results["aggregator"]
        xs = [float(r["batch"]) for r in rows]
        _panels(
            target("aggregator"),
            f"Aggregator (ours) — {date}",
            [
                (
                    "records/s per invocation",
                    {"ours": (xs, [r["first"]["records_per_s"] for r in rows])},
                    "batch",
                    True,
                ),
                (
                    "snapshot writes per record",
                    {"ours": (xs, [r["first"]["snapshot_writes_per_record"] for r in rows])},
                    "batch",
                    True,
                ),
                (
                    "changes on replay",
                    {"ours": (xs, [r["replay"]["applied"] for r in rows])},
                    "batch",
                    True,
                ),
            ],
        )
    applied = [r for r in results.get("manifest", []) if "error" not in r]
    if applied:
        _manifest_bars(
            target("manifest"),
            f"`limits apply` (ours), {applied[-1]['entities']:,} entities × 3 resources — {date}",
            applied[-1],
        )
    return plots


def _bars(path: Path, title: str, data: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    row = data
    figure, axes = plt.subplots(1, 2, figsize=(8.4, 3.6))
    labels = [WHO_LABEL[i] for i in IMPLS if i in row]
    axes[0].bar(
        labels,
        [row[i].get("admitted_with_warmup", 0) for i in IMPLS if i in row],
        color=[COLOURS[i] for i in IMPLS if i in row],
    )
    allowed = next(iter(row.values())).get("allowed", 0)
    axes[0].axhline(allowed, color="black", linestyle="--", label=f"allowed ({allowed:,})")
    axes[0].set_ylabel("admitted units")
    axes[0].legend(fontsize=8)
    axes[1].bar(
        labels,
        [row[i].get("p99_us", 0) / 1000 for i in IMPLS if i in row],
        color=[COLOURS[i] for i in IMPLS if i in row],
    )
    axes[1].set_ylabel("p99 ms")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _manifest_bars(path: Path, title: str, data: dict[str, Any]) -> None:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    steps = ["apply", "plan"]
    for axis, key, label in zip(
        axes, ("requests", "wcu", "wall_s"), ("requests", "WCU", "seconds"), strict=True
    ):
        axis.bar(steps, [data[s][key] for s in steps], color=COLOURS["ours"])
        axis.set_ylabel(label)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
