"""Client CPU per warm acquire: this tree against another revision, alternated in one run.

    .venv/bin/python -m benchmarks.trees REV [--this REV2] [--rounds 25] [--block 100]

For a change that must not cost CPU (a restructure), against the revision before it. Extracts
`runtime/` of REV (`git archive`) into a temporary directory and starts two `benchmarks.worker`
processes with this venv's interpreter on one DynamoDB Local: "this" imports the working tree's
`zae_limiter`, "other" the extracted one (first on its `PYTHONPATH`; both import paths are
checked); with `--this REV2`, "this" is REV2's extracted `runtime/` (two revisions, for example
a merge against its first parent). Each round times `--block` warm single-resource and
three-bucket acquires per side (the timing phase's calls, `time.process_time` of the worker),
who goes first alternating; the report gives per case the median of the per-round ratios this /
other and the ratio of the summed CPU. Writes `benchmarks/results/NAME.md` and `.json`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.run import RESULTS, ROOT, WorkerProcess, log, machine
from benchmarks.scenarios import TIMING_CASES

SIDES = ("this", "other")


def extract_runtime(rev: str, into: Path) -> str:
    """`runtime/` of `rev` under `into`; returns the revision's full hash."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", sha, "runtime"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return sha


def per_call_us(block: dict[str, Any]) -> float:
    calls = sum(block["outcomes"].values())
    return float(block["cpu_s"]) / float(calls) * 1e6


def measure(
    rev: str, rounds: int, block: int, this_rev: str | None = None, warm_rounds: int = 5
) -> dict[str, Any]:
    from zae_limiter.local import start_engine

    with tempfile.TemporaryDirectory(prefix="zae-trees-") as tmp:
        dirs = {"this": Path(tmp) / "this", "other": Path(tmp) / "other"}
        sha = extract_runtime(rev, dirs["other"])
        this_sha = extract_runtime(this_rev, dirs["this"]) if this_rev else "working tree"
        paths = {"this": dirs["this"] if this_rev else ROOT, "other": dirs["other"]}
        engine = start_engine()
        workers: dict[str, WorkerProcess] = {}
        try:
            for side in SIDES:
                env = {"PYTHONPATH": str(paths[side] / "runtime")} if paths[side] != ROOT else {}
                workers[side] = WorkerProcess(
                    "ours", sys.executable, engine.endpoint_url, Path(tmp), f"-{side}", env
                )
            info = {side: workers[side].call("info") for side in SIDES}
            for side in SIDES:
                assert info[side]["zae_limiter_path"].startswith(str(paths[side])), info
            for side in SIDES:
                log(f"trees: setting up and warming {side}")
                workers[side].call("timing_setup", warm_rounds=warm_rounds)
            cpu: dict[str, dict[str, list[float]]] = {
                case: {side: [] for side in SIDES} for case in TIMING_CASES
            }
            for number in range(rounds):
                order = SIDES if number % 2 == 0 else SIDES[::-1]
                for case in TIMING_CASES:
                    for side in order:
                        answer = workers[side].call("timing_block", case=case, n=block)
                        cpu[case][side].append(per_call_us(answer))
                if number % 5 == 4:
                    log(f"trees: round {number + 1}/{rounds}")
        finally:
            for worker in workers.values():
                worker.close()
            engine.stop()
    cases = {}
    for case in TIMING_CASES:
        this, other = cpu[case]["this"], cpu[case]["other"]
        cases[case] = {
            "cpu_us": cpu[case],
            "ratios": [t / o for t, o in zip(this, other, strict=True)],
            "median_ratio": statistics.median(t / o for t, o in zip(this, other, strict=True)),
            "summed_ratio": sum(this) / sum(other),
            "median_us": {side: statistics.median(cpu[case][side]) for side in SIDES},
        }
    return {
        "rev": rev,
        "sha": sha,
        "this": this_rev or "working tree",
        "this_sha": this_sha,
        "rounds": rounds,
        "block": block,
        "cases": cases,
    }


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"# Client CPU per warm acquire: {result['this']} ({result['this_sha'][:10]}) against "
        f"{result['rev']} ({result['sha'][:10]})",
        "",
        "Generated by `python -m benchmarks.trees` (one DynamoDB Local, two workers with the same "
        "interpreter, each importing its own tree's `zae_limiter`; blocks alternated, who goes "
        "first alternating each round).",
        "",
        f"- Machine: {m['cpus']} CPUs, {m['platform']}, Python {m['python']}; load average "
        f"{result['load_before']} at start, {result['load_after']} at end",
        f"- Plan: {result['rounds']} rounds of {result['block']} calls per case and side",
        "",
        "| case | this µs (median) | other µs (median) | this / other, median of rounds "
        "| this / other, summed |",
        "|---|---|---|---|---|",
    ]
    for case, c in result["cases"].items():
        lines.append(
            f"| {case} | {c['median_us']['this']:.0f} | {c['median_us']['other']:.0f} "
            f"| {c['median_ratio']:.3f} | {c['summed_ratio']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision to compare against (for example HEAD~3)")
    parser.add_argument("--this", help="a revision in place of the working tree")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--name", help="results file stem (default: trees-<rev's hash>)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_before = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    result = measure(args.rev, args.rounds, args.block, args.this)
    result |= {
        "machine": machine(),
        "load_before": load_before,
        "load_after": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    name = args.name or f"trees-{result['sha'][:10]}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    (args.out / f"{name}.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
