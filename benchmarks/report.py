"""The Markdown report, the target verdicts and the latency plot, from a results dict."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks.stats import percentile
from benchmarks.targets import (
    PER_MILLION_ROWS,
    RCU_PRICE_PER_MILLION_USD,
    WCU_PRICE_PER_MILLION_USD,
    describe,
)

IMPLS = ("ours", "theirs")
WHO_LABEL = {"ours": "ours", "theirs": "0.17.0", "floor": "transport floor"}
CASE_LABEL = {
    "single": "warm single-resource acquire",
    "three": "three-bucket acquire (seed call: search + org cascade + budget)",
}
KIND_LABEL = {
    "distinct": "concurrent tasks, distinct entities",
    "one_entity": "concurrent tasks, one entity",
    "org_cap": "concurrent users under one organisation cap",
}
CPU_TARGET_RATIO = 0.4  # issue 25: for the single-resource and the three-bucket call


# --- formatting ----------------------------------------------------------------------------------


def num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if (isinstance(value, float) and not value.is_integer()) or digits:
        return f"{value:,.{digits}f}"
    return f"{int(value):,}"


def ms(us: float) -> str:
    return "–" if us is None or math.isnan(us) else f"{us / 1000:.2f}"


def times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def cost_cell(measured: dict[str, Any] | None) -> str:
    if not measured:
        return "not measured"
    cell = (
        f"{measured['round_trips']} / {num(measured['rcu'], 1 if measured['rcu'] % 1 else 0)}"
        f" / {num(measured['wcu'], 1 if measured['wcu'] % 1 else 0)}"
    )
    if measured.get("index_wcu"):
        cell += f" (idx {num(measured['index_wcu'])})"
    cell += f"; {measured['requests']} req"
    return cell


def outcome_note(row: dict[str, Any], impl: str) -> str:
    measured = row.get(impl)
    if not measured:
        return ""
    if measured["outcome"] != row["expected_outcome"]:
        return f"{WHO_LABEL[impl]}: {measured['outcome']} (expected {row['expected_outcome']})"
    return ""


def deferred(row: dict[str, Any], impl: str) -> bool:
    """The spec wants a write at this point and the implementation sent none."""
    measured, wanted = row.get(impl), row["target"].get("round_trips")
    return bool(
        measured
        and wanted
        and wanted[0] == "=="
        and wanted[1] > 0
        and measured["requests"] == 0
        and measured["outcome"] == row["expected_outcome"]
    )


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def mark(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[met]


# --- targets -------------------------------------------------------------------------------------


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each with a verdict and the figures behind it."""
    verdicts: list[dict[str, Any]] = []
    if "costs" in results:
        rows = results["costs"]["rows"]
        for label, pick in (
            ("every seed cost row, table and indexes", lambda r: r["seed"]),
            ("reference.md §6 other operations", lambda r: not r["seed"]),
        ):
            chosen = [r for r in rows if pick(r)]
            missed = [r["id"] for r in chosen if not r["met_ours"]]
            verdicts.append(
                {
                    "target": label,
                    "met": not missed,
                    "detail": (
                        f"{len(chosen) - len(missed)}/{len(chosen)} rows met"
                        + (f"; missed: {', '.join(missed)}" if missed else "")
                    ),
                }
            )
    if "timing" in results:
        cases = results["timing"]["cases"]
        cpu = cases["single"]["ratios"]["cpu_us_per_call"]
        cpu_three = cases["three"]["ratios"]["cpu_us_per_call"]
        verdicts.append(
            {
                "target": (
                    f"client CPU per warm acquire ≤ {CPU_TARGET_RATIO}× 0.17.0's (both calls)"
                ),
                "met": all(r is not None and r <= CPU_TARGET_RATIO for r in (cpu, cpu_three)),
                "detail": (
                    f"single resource {num(cases['single']['ours']['cpu_us_per_call'])} vs "
                    f"{num(cases['single']['theirs']['cpu_us_per_call'])} µs = {times(cpu)}; "
                    f"three-bucket {times(cases['three']['ratios']['cpu_us_per_call'])}"
                ),
            }
        )
        for key, label in (("p50_us", "p50"), ("p99_us", "p99")):
            worse = {
                case: c["ratios"][key]
                for case, c in cases.items()
                if c["ratios"][key] is None or c["ratios"][key] > 1.0
            }
            verdicts.append(
                {
                    "target": f"{label} latency no worse than 0.17.0",
                    "met": not worse,
                    "detail": "; ".join(
                        f"{case} {ms(c['ours'][key])} vs {ms(c['theirs'][key])} ms"
                        f" = {times(c['ratios'][key])}"
                        for case, c in cases.items()
                    ),
                }
            )
    if "contention" in results:
        contention = results["contention"]
        over = {kind: c["ours"]["over_admitted"] for kind, c in contention.items()}
        errors = {
            kind: c["ours"]["errors"] for kind, c in contention.items() if c["ours"]["errors"]
        }
        verdicts.append(
            {
                "target": "zero over-admission in every contention scenario",
                "met": not any(over.values()),
                "detail": ", ".join(f"{k}: {v} over" for k, v in over.items())
                + (f"; errors {errors}" if errors else ""),
            }
        )
    return verdicts


# --- sections ------------------------------------------------------------------------------------


def environment(results: dict[str, Any]) -> str:
    meta = results["meta"]
    libs = meta.get("libraries", {})
    start, end = meta["machine_start"], meta.get("machine_end", {})
    lines = [
        f"- Mode: **{meta['mode']}**, started {meta['started']}, took {meta.get('duration_s')} s"
        + "".join(f"; {p} {meta[f'{p}_s']} s" for p in meta["phases"] if f"{p}_s" in meta),
        f"- Machine: {start['cpus']} CPUs, {start['platform']}, Python {start['python']}; "
        f"load average {', '.join(f'{x:.1f}' for x in start['loadavg'])} at start, "
        f"{', '.join(f'{x:.1f}' for x in end.get('loadavg', []))} at end",
    ]
    loads = meta.get("load_before", {})
    if loads:
        lines.append(
            "- Load average (1 min) as each phase began: "
            + ", ".join(f"{phase} {load[0]:.1f}" for phase, load in loads.items())
        )
    for impl in IMPLS:
        lib = libs.get(impl)
        if lib:
            lines.append(
                f"- {WHO_LABEL[impl]}: zae_limiter {lib['zae_limiter']} from "
                f"`{lib['zae_limiter_path']}`, aiobotocore {lib['aiobotocore']}, "
                f"botocore {lib['botocore']}"
            )
    plan = meta["plan"]
    lines.append(
        f"- Plan: {plan['calls_single']} warm single-resource and {plan['calls_three']} "
        f"three-bucket sequential calls per implementation in blocks "
        f"of {plan['block']} (alternating, first mover alternating), {plan['warm_rounds']} warm-up"
        f" calls per entity; contention {plan['contention_rounds']} round(s) per scenario, "
        f"{plan['tasks']} tasks; distinct: {plan['distinct_attempts']} attempts per task, cap "
        f"{plan['distinct_capacity']} per entity; one entity / org cap: "
        f"{plan['shared_attempts']} attempts per task, cap {plan['shared_capacity']}"
    )
    lines.append(
        "- Engine: DynamoDB Local (in memory) on 127.0.0.1 on the same machine, a fresh "
        "one per phase; each implementation with its default client settings."
    )
    return "\n".join(lines)


def costs_section(costs: dict[str, Any]) -> str:
    rows, notes = [], []
    for row in costs["rows"]:
        target = row["target"]
        rows.append(
            [
                row["title"] + (f" *(seed {row['seed']})*" if row["seed"] else ""),
                " / ".join(describe(target, m) for m in ("round_trips", "rcu", "wcu")),
                cost_cell(row.get("ours")),
                mark(row["met_ours"]),
                cost_cell(row.get("theirs")),
                mark(row["met_theirs"]),
                times(_ratio(row, "wcu")),
            ]
        )
        notes += [n for n in (outcome_note(row, i) for i in IMPLS) if n]
        notes += [
            f"{WHO_LABEL[i]} sent nothing for “{row['title']}”: it writes later (at exit)"
            for i in IMPLS
            if deferred(row, i)
        ]
    text = table(
        [
            "Case",
            "Target RT / RCU / WCU",
            "ours RT / RCU / WCU",
            "met",
            "0.17.0 RT / RCU / WCU",
            "met",
            "WCU ours/0.17.0",
        ],
        rows,
    )
    text += (
        "\n\nRT = round trips (waves of requests sent together), WCU = table + indexes "
        "(index share shown as *idx* when not 0), failed conditional writes at 1 WCU, "
        "transactions at 2 WCU per item (DynamoDB Local under-reports them); *req* = "
        "DynamoDB requests."
    )
    for impl, errors in costs.get("setup_errors", {}).items():
        notes += [f"{WHO_LABEL[impl]}: {k}: {v}" for k, v in errors.items()]
    if notes:
        text += "\n\nNotes: " + "; ".join(notes)
    return text


def _ratio(row: dict[str, Any], metric: str) -> float | None:
    from benchmarks.stats import ratio

    ours, theirs = row.get("ours"), row.get("theirs")
    return ratio(ours and ours.get(metric), theirs and theirs.get(metric))


def per_million_section(costs: dict[str, Any]) -> str:
    by_id = {row["id"]: row for row in costs["rows"]}
    rows = []
    for title, ids in PER_MILLION_ROWS:
        target = sum(by_id[i]["target"]["wcu"][1] for i in ids)
        cells = [title, f"{num(target)} WCU, ${target * WCU_PRICE_PER_MILLION_USD:.2f}"]
        for impl in IMPLS:
            got = [by_id[i].get(impl) for i in ids]
            if all(got):
                wcu = sum(g["wcu"] for g in got if g)
                rcu = sum(g["rcu"] for g in got if g)
                usd = wcu * WCU_PRICE_PER_MILLION_USD + rcu * RCU_PRICE_PER_MILLION_USD
                cells.append(f"{num(wcu, 1 if wcu % 1 else 0)} WCU, ${usd:.2f}")
            else:
                cells.append("–")
        rows.append(cells)
    return table(["Call (seed page 001)", "spec", "ours", "0.17.0"], rows) + (
        f"\n\nPer million calls, on-demand writes at ${WCU_PRICE_PER_MILLION_USD} per million "
        f"WCU (reads at ${RCU_PRICE_PER_MILLION_USD} per million RCU; the warm path reads "
        "nothing)."
    )


def timing_section(timing: dict[str, Any]) -> str:
    rows = []
    for case, c in timing["cases"].items():
        for who in ("ours", "theirs", "floor"):
            s = c[who]
            rows.append(
                [
                    CASE_LABEL[case] if who == "ours" else "",
                    WHO_LABEL[who],
                    num(s["n"]),
                    ms(s["p50_us"]),
                    ms(s["p90_us"]),
                    ms(s["p99_us"]),
                    num(s["cpu_us_per_call"]),
                    num(s["calls_per_s"]),
                ]
            )
        r = c["ratios"]
        rows.append(
            [
                "",
                "**ours / 0.17.0**",
                "",
                times(r["p50_us"]),
                times(r["p90_us"]),
                times(r["p99_us"]),
                times(r["cpu_us_per_call"]),
                times(r["calls_per_s"]),
            ]
        )
        d = c["ours_minus_floor"]
        rows.append(
            [
                "",
                "ours − floor (the limiter's own)",
                "",
                ms(d["p50_us"]),
                "",
                ms(d["p99_us"]),
                num(d["cpu_us_per_call"]),
                "",
            ]
        )
    text = table(
        ["Case", "who", "calls", "p50 ms", "p90 ms", "p99 ms", "client CPU µs/call", "calls/s"],
        rows,
    )
    setup = timing.get("floor_setup", {})
    text += (
        "\n\nClient CPU is `time.process_time()` of the calling process over the calls, "
        "divided by their number. The transport floor replays ours' own warm "
        "UpdateItem(s) with the bare aiobotocore client (sent together when there are "
        "several), on copies of the same items, with the condition reduced to "
        "`attribute_exists` so that every replay applies: "
        + ", ".join(
            f"{case}: {v['replayed_update_items']} UpdateItem(s) per call"
            for case, v in setup.items()
        )
        + "."
    )
    return text


def contention_section(contention: dict[str, Any]) -> str:
    rows = []
    for kind, c in contention.items():
        for impl in IMPLS:
            s = c[impl]
            rows.append(
                [
                    KIND_LABEL[kind] if impl == "ours" else "",
                    WHO_LABEL[impl],
                    num(s["attempts"]),
                    num(s["admitted"]),
                    num(s["allowed"]),
                    f"**{s['over_admitted']}**" if s["over_admitted"] else "0",
                    ", ".join(f"{k} {v}" for k, v in s["errors"].items()) or "0",
                    num(s["calls_per_s"]),
                    num(s["admitted_per_s"]),
                    num(s["cpu_us_per_call"]),
                    num(s["requests_per_call"], 2),
                    num(s["wcu_per_admitted"], 2),
                ]
            )
        r = c["ratios"]
        rows.append(
            [
                "",
                "**ours / 0.17.0**",
                "",
                "",
                "",
                "",
                "",
                times(r["calls_per_s"]),
                times(r["admitted_per_s"]),
                times(r["cpu_us_per_call"]),
                times(r["requests_per_call"]),
                times(r["wcu_per_admitted"]),
            ]
        )
    return table(
        [
            "Scenario",
            "who",
            "attempts",
            "admitted",
            "allowed",
            "over-admitted",
            "errors",
            "calls/s",
            "admitted/s",
            "CPU µs/call",
            "requests/call",
            "WCU/admitted",
        ],
        rows,
    ) + (
        "\n\nEach task makes its attempts back to back; a capped bucket allows its capacity "
        "plus what refilled while the run lasted (per-day limits: nothing, in practice). "
        "Throughput counts every attempt, admitted or rejected, over the wall time of the "
        "gathered tasks, all in one event loop (one process)."
    )


def targets_section(results: dict[str, Any]) -> str:
    return table(
        ["Target", "met", "figures"],
        [[v["target"], mark(v["met"]), v["detail"]] for v in evaluate_targets(results)],
    )


def markdown(
    results: dict[str, Any], plot_name: str | None, scale_plots: dict[str, str] | None = None
) -> str:
    meta = results["meta"]
    parts = [
        f"# Benchmark: ours vs zae-limiter 0.17.0 — {meta['date']} ({meta['mode']})",
        "Generated by `python -m benchmarks.run` (docs/performance.md explains it). "
        "The machine is shared and loaded: absolute times are noisy; the ratios, measured "
        "alternately in the same run, are what to compare.",
        "## Environment",
        environment(results),
    ]
    if "costs" in results or "timing" in results or "contention" in results:
        parts += ["## Targets", targets_section(results)]
    if "costs" in results:
        parts += [
            "## Cost per call on the wire",
            costs_section(results["costs"]),
            "## Cost per million calls",
            per_million_section(results["costs"]),
        ]
    if "timing" in results:
        parts += [
            "## Latency and client CPU (sequential, warm caches)",
            timing_section(results["timing"]),
        ]
        if plot_name:
            parts.append(f"![latency distributions]({plot_name})")
    if "contention" in results:
        parts += [
            "## Throughput and correctness under contention",
            contention_section(results["contention"]),
        ]
    if "hot" in results:
        parts += ["## One hot item far below its limit (real clock)", hot_section(results["hot"])]
    if "outage" in results:
        from benchmarks import outage

        parts += [
            "## Outages (deadlines 0.2 s and 1 s; 0.17.0 beside)",
            outage.section(results["outage"]),
        ]
    if "overload" in results:
        from benchmarks import overload

        parts += [
            "## Overload: a table slower than demand",
            overload.section(results["overload"]),
        ]
    if "concurrency" in results:
        from benchmarks import concurrency_cpu

        parts += [
            "## A concurrency limit against a rate limit (ours, client CPU)",
            concurrency_cpu.section(results["concurrency"]),
        ]
    if "regions" in results:
        from benchmarks import regions

        parts += [
            "## Three Regions, multi-Region strong consistency (ours, simulated)",
            regions.section(results["regions"]),
        ]
    if "fleet" in results:
        from benchmarks import fleet

        parts += ["## A fleet of writers (issue 43)", fleet.section(results["fleet"])]
    parts += report_scale.sections(results, scale_plots or {})
    return "\n\n".join(parts) + "\n"


def hot_section(hot: dict[str, Any]) -> str:
    rows = []
    for tasks, row in hot.items():
        for impl in ("ours", "theirs"):
            r = row[impl]
            rows.append(
                [
                    tasks if impl == "ours" else "",
                    impl,
                    num(r["admitted_per_s"]),
                    num(r["rejected"]),
                    num(sum(r["errors"].values())),
                ]
            )
        rows.append(["", "ours/0.17.0", times(row["ratio"]), "", ""])
    return table(["Tasks", "who", "admitted/s", "rejected", "errors"], rows)


# --- plot ----------------------------------------------------------------------------------------


def latency_percentiles(latencies: dict[str, dict[str, list[int]]]) -> dict[str, Any]:
    """Every whole percentile (0..100) of each series: enough to redraw the distributions."""
    return {
        case: {
            who: [round(percentile(values, q)) for q in range(101)]
            for who, values in series.items()
        }
        for case, series in latencies.items()
    }


def plot_latency(results: dict[str, Any], path: Path) -> Path | None:
    """Latency distributions (CDF, log scale) per timing case; None without matplotlib.

    Drawn from the whole percentiles kept in the results, so a JSON file can be replotted.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        return None
    series_by_case = results["timing"]["latency_percentiles_us"]
    colours = {"ours": "tab:blue", "theirs": "tab:orange", "floor": "tab:gray"}
    figure, axes = plt.subplots(
        1, len(series_by_case), figsize=(6 * len(series_by_case), 4.2), squeeze=False
    )
    for axis, (case, series) in zip(axes[0], series_by_case.items(), strict=True):
        for who, percentiles in series.items():
            if not percentiles:
                continue
            values_ms = [v / 1000 for v in percentiles]
            axis.plot(
                values_ms,
                [q / 100 for q in range(len(values_ms))],
                color=colours[who],
                linewidth=1.6,
                label=f"{WHO_LABEL[who]} (p50 {values_ms[50]:.1f} ms, p99 {values_ms[99]:.1f} ms)",
            )
        axis.set_xscale("log")
        axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("latency per call, ms (log scale)")
        axis.set_ylabel("fraction of calls")
        axis.set_title(CASE_LABEL[case], fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    meta = results["meta"]
    figure.suptitle(
        f"zae-limiter latency, ours vs 0.17.0 on DynamoDB Local — {meta['date']} ({meta['mode']})",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write(results: dict[str, Any], json_path: Path) -> list[Path]:
    """The results as JSON, the Markdown report and the plot, side by side."""
    stem = json_path.name.removesuffix(".json")
    plotted = None
    if "timing" in results:
        plotted = plot_latency(results, json_path.with_name(f"{stem}-latency.png"))
    scale_plots = report_scale.plot_all(results, json_path.with_name(stem))
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path = json_path.with_name(f"{stem}.md")
    md_path.write_text(
        markdown(
            results,
            plotted.name if plotted else None,
            {phase: p.name for phase, p in scale_plots.items()},
        )
    )
    return [p for p in (json_path, md_path, plotted, *scale_plots.values()) if p is not None]


from benchmarks import report_scale  # noqa: E402  (it imports this module's helpers)


def main() -> None:
    """Redraw the report and plot of a results file: python -m benchmarks.report FILE.json"""
    import sys

    for name in sys.argv[1:]:
        path = Path(name)
        print(*write(json.loads(path.read_text()), path), sep="\n")


if __name__ == "__main__":
    main()
