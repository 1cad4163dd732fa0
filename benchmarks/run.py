"""Run the benchmark: ours vs zae-limiter 0.17.0, alternating, on DynamoDB Local.

    python -m benchmarks.run            # the full run (under 15 minutes on 2 busy cores)
    python -m benchmarks.run --quick    # a smoke run (under 3 minutes), results *-quick.*

Makes (once, about 30–150 s) `benchmarks/.venv-0.17.0` with zae-limiter==0.17.0 and the same
aiobotocore as ours. For each phase it starts a fresh DynamoDB Local on 127.0.0.1 and one worker
per implementation (benchmarks/worker.py), stops them all at the end of the phase whatever
happens, and drives the workers in turn:

1. costs: every cost row (benchmarks/targets.py) on the wire, once per implementation;
2. timing: warm single-resource and three-bucket acquires in blocks, alternating ours and
   theirs (and who goes first), plus the transport floor in ours' process;
3. contention: 32 concurrent tasks on distinct entities, on one entity, and under one
   organisation cap, alternating;
4. hot: one hot item far below its limit, 1 to 64 tasks;
5. outage: benchmarks/outage.py on an engine of its own, time per acquire per outage shape,
   deadline and mode, and what is left after the drain; then 0.17.0 (no deadline: how long it
   holds the caller, capped at 60 s a call) behind the same proxy;
6. concurrency: benchmarks/concurrency_cpu.py on an engine of its own (ours only), client CPU of
   a warm call with a concurrency limit against one with a rate limit, alternated, 2 RT and
   2 WCU per call asserted (acceptance: within 5 %);
6b. regions: benchmarks/regions.py on an engine of its own (ours only), three simulated Regions
   of an MRSC global table: per Region warm acquire p50/p99 and WCU per call, conflicts per
   1,000 calls with and without regional shards, transfers per 1,000 calls at a hot organisation;
7. fleet: benchmarks/fleet.py, what 0, 100 and 1,000 writers (each a repository) leave on
   items, spread over five minutes or at once, and 200 writers in a loop on one item;
7b. overload: benchmarks/overload.py, each row on an engine of its own, ours and 0.17.0
   alternated: the hot organisation and one hot item at 32 and 128 tasks, on the engine and
   behind a proxy capping the table at 30 writes a second; 32 tasks on distinct users and on one
   user (single and three-bucket);
8. the scale phases of benchmarks/run_scale.py (how cost grows): breakdown, resources,
   entities, hot_procs, hot_org, aggregator, manifest.

Writes benchmarks/results/<date>[-quick].json, .md and -latency.png (benchmarks/report.py).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from benchmarks import concurrency_cpu, fleet, outage, overload, regions, report, run_scale, stats
from benchmarks.scenarios import CONTENTION_KINDS, HOT_TASKS, TIMING_CASES
from benchmarks.targets import COST_ROWS, check
from zae_limiter.local.engine import AMBIENT_AWS_VARIABLES, ISOLATED_AWS_ENV

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
THEIRS_VERSION = "0.17.0"
THEIRS_VENV = ROOT / "benchmarks" / f".venv-{THEIRS_VERSION}"
IMPLS = ("ours", "theirs")
ALL_PHASES = (
    "costs",
    "timing",
    "contention",
    "hot",
    "outage",
    "concurrency",
    "regions",
    "fleet",
    "overload",
    *run_scale.PHASES,
)

#: The same local credentials for both workers (DynamoDB Local wants an alphanumeric key id).
LOCAL_ENV = {**ISOLATED_AWS_ENV, "PYTHONUNBUFFERED": "1"}
CLEARED_ENV = (*AMBIENT_AWS_VARIABLES, "ZAEL_STACK", "PYTHONPATH")


@dataclass(frozen=True)
class Plan:
    """How much of everything to run."""

    calls_single: int  # sequential warm single-resource acquires per implementation
    calls_three: int  # sequential three-bucket acquires per implementation
    block: int  # calls per block; blocks alternate between the implementations
    warm_rounds: int  # warm-up calls per timing entity before measuring
    contention_rounds: int
    tasks: int
    distinct_attempts: int  # per task; each task's entity is capped at distinct_capacity
    distinct_capacity: int
    shared_attempts: int  # per task, on one entity / under one organisation
    shared_capacity: int

    def calls(self, case: str) -> int:
        return self.calls_single if case == "single" else self.calls_three

    def contention_args(self, kind: str) -> dict[str, int]:
        if kind == "distinct":
            return {
                "tasks": self.tasks,
                "attempts": self.distinct_attempts,
                "capacity": self.distinct_capacity,
            }
        return {
            "tasks": self.tasks,
            "attempts": self.shared_attempts,
            "capacity": self.shared_capacity,
        }


FULL = Plan(
    calls_single=1200,
    calls_three=800,
    block=200,
    warm_rounds=5,
    contention_rounds=1,
    tasks=32,
    distinct_attempts=40,
    distinct_capacity=30,
    shared_attempts=16,
    shared_capacity=400,
)
QUICK = Plan(
    calls_single=100,
    calls_three=100,
    block=50,
    warm_rounds=2,
    contention_rounds=1,
    tasks=8,
    distinct_attempts=4,
    distinct_capacity=3,
    shared_attempts=3,
    shared_capacity=60,
)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the earlier implementation's venv ---------------------------------------------------------


def ensure_theirs_venv() -> Path:
    """benchmarks/.venv-0.17.0 with zae-limiter==0.17.0 and our aiobotocore version."""
    import aiobotocore

    python = THEIRS_VENV / "bin" / "python"
    stamp = THEIRS_VENV / ".bench-stamp"
    wanted = [f"zae-limiter=={THEIRS_VERSION}", f"aiobotocore=={aiobotocore.__version__}"]
    if python.exists() and stamp.exists() and stamp.read_text() == " ".join(wanted):
        return python
    log(f"creating {THEIRS_VENV.relative_to(ROOT)} with {' '.join(wanted)}")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--clear", str(THEIRS_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *wanted],
        check=True,
    )
    stamp.write_text(" ".join(wanted))
    return python


# --- workers -----------------------------------------------------------------------------------


class WorkerError(RuntimeError):
    pass


class WorkerProcess:
    """One `benchmarks.worker` child process, spoken to in JSON lines."""

    def __init__(
        self,
        impl: str,
        python: Path | str,
        endpoint_url: str,
        log_dir: Path,
        suffix: str = "",
        env: dict[str, str] | None = None,
    ) -> None:
        self.impl = impl
        self.log_path = log_dir / f"worker-{impl}{suffix}.log"
        self._log: IO[str] = self.log_path.open("w")
        inherited = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
        env = inherited | LOCAL_ENV | (env or {})
        self.process = subprocess.Popen(
            [str(python), "-m", "benchmarks.worker", "--impl", impl, "--endpoint", endpoint_url],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def call(self, op: str, **args: Any) -> Any:
        self.send(op, **args)
        return self.receive(op)

    def send(self, op: str, **args: Any) -> None:
        """Send a request without waiting (several workers can then work at once)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()

    def receive(self, op: str) -> Any:
        """The answer to the request sent last."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise WorkerError(f"{self.impl} worker exited during {op}:\n{self.log_tail()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise WorkerError(
                f"{self.impl} worker failed {op}: {answer['error']}\n{self.log_tail()}"
            )
        return answer["result"]

    def log_tail(self, lines: int = 25) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()  # our own child, by its handle
                self.process.wait(timeout=10)
        self._log.close()


class Spawner:
    """Starts more workers for a session: on its engine, or at another endpoint (a proxy)."""

    def __init__(self, pythons: dict[str, Path], endpoint_url: str, log_dir: Path) -> None:
        self.pythons = pythons
        self.endpoint_url = endpoint_url
        self.log_dir = log_dir
        self._numbers = itertools.count(1)

    def __call__(self, impl: str, endpoint_url: str | None = None) -> WorkerProcess:
        return WorkerProcess(
            impl,
            self.pythons[impl],
            endpoint_url or self.endpoint_url,
            self.log_dir,
            suffix=f"-{next(self._numbers)}",
        )


Session = tuple[dict[str, WorkerProcess], Spawner]


@contextlib.contextmanager
def fresh_session(theirs_python: Path) -> Iterator[Session]:
    """A new DynamoDB Local and a new worker per implementation, all stopped afterwards.

    Each phase gets its own, so that what one phase left behind (tables, items, the JVM's
    heap) cannot tilt the next one's figures. Also yields `spawn(impl)`: another worker on the
    same engine (the caller closes it).
    """
    from zae_limiter.local import start_engine

    log("starting DynamoDB Local")
    engine = start_engine()
    workers: dict[str, WorkerProcess] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="zae-bench-") as log_dir:
            pythons = {"ours": Path(sys.executable), "theirs": theirs_python}
            spawn = Spawner(pythons, engine.endpoint_url, Path(log_dir))
            try:
                for impl, python in pythons.items():
                    workers[impl] = WorkerProcess(impl, python, engine.endpoint_url, Path(log_dir))
                yield workers, spawn
            finally:
                for worker in workers.values():
                    worker.close()
    finally:
        engine.stop()


def alternate(round_number: int) -> tuple[str, ...]:
    """Who goes first alternates each round, so drift does not favour one side."""
    return IMPLS if round_number % 2 == 0 else IMPLS[::-1]


# --- phases ------------------------------------------------------------------------------------


def run_costs(workers: dict[str, WorkerProcess]) -> dict[str, Any]:
    measured = {impl: workers[impl].call("costs") for impl in IMPLS}
    rows = []
    for row in COST_ROWS:
        entry: dict[str, Any] = {
            "id": row.id,
            "title": row.title,
            "seed": row.seed,
            "target": row.target,
            "expected_outcome": row.outcome,
        }
        for impl in IMPLS:
            got = measured[impl].get(row.id)
            entry[impl] = got
            entry[f"met_{impl}"] = (
                bool(got) and got["outcome"] == row.outcome and check(row.target, got)
            )
        rows.append(entry)
    setup_errors = {
        impl: {k: v for k, v in measured[impl].items() if k.endswith("setup_error")}
        for impl in IMPLS
    }
    return {"rows": rows, "setup_errors": setup_errors}


def run_timing(workers: dict[str, WorkerProcess], plan: Plan) -> dict[str, Any]:
    for impl in IMPLS:
        log(f"timing: setting up and warming {impl}")
        workers[impl].call("timing_setup", warm_rounds=plan.warm_rounds)
    floor_setup = workers["ours"].call("floor_setup")
    blocks: dict[str, dict[str, list[dict[str, Any]]]] = {
        case: {"ours": [], "theirs": [], "floor": []} for case in TIMING_CASES
    }
    rounds = {case: max(1, plan.calls(case) // plan.block) for case in TIMING_CASES}
    for number in range(max(rounds.values())):
        for case in (case for case in TIMING_CASES if number < rounds[case]):
            for impl in alternate(number):
                blocks[case][impl].append(
                    workers[impl].call("timing_block", case=case, n=plan.block)
                )
            blocks[case]["floor"].append(
                workers["ours"].call("floor_block", case=case, n=plan.block)
            )
        if number % 4 == 3 or number == max(rounds.values()) - 1:
            log(f"timing: round {number + 1}/{max(rounds.values())}")
    cases: dict[str, Any] = {}
    for case in TIMING_CASES:
        summary = {who: stats.merge_timing(blocks[case][who]) for who in blocks[case]}
        summary["ratios"] = stats.ratios(
            summary["ours"],
            summary["theirs"],
            ("p50_us", "p90_us", "p99_us", "mean_us", "cpu_us_per_call", "calls_per_s"),
        )
        summary["ours_minus_floor"] = {
            key: summary["ours"][key] - summary["floor"][key]
            for key in ("p50_us", "p99_us", "cpu_us_per_call")
        }
        cases[case] = summary
    latencies = {
        case: {who: [v for b in blocks[case][who] for v in b["lat_us"]] for who in blocks[case]}
        for case in TIMING_CASES
    }
    return {"cases": cases, "floor_setup": floor_setup, "rounds": rounds, "latencies_us": latencies}


def run_contention(workers: dict[str, WorkerProcess], plan: Plan) -> dict[str, Any]:
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
        kind: {impl: [] for impl in IMPLS} for kind in CONTENTION_KINDS
    }
    turns = itertools.count()
    for _ in range(plan.contention_rounds):
        for kind in CONTENTION_KINDS:
            for impl in alternate(next(turns)):
                result = workers[impl].call("contention", kind=kind, **plan.contention_args(kind))
                rounds[kind][impl].append(result)
                log(
                    f"contention {kind} {impl}: {result['admitted']}/{result['allowed']} "
                    f"admitted/allowed, {result['calls_per_s']:.0f} calls/s"
                )
    out: dict[str, Any] = {}
    for kind in CONTENTION_KINDS:
        summary = {impl: stats.merge_contention(rounds[kind][impl]) for impl in IMPLS}
        out[kind] = {
            **summary,
            "ratios": stats.ratios(
                summary["ours"],
                summary["theirs"],
                (
                    "calls_per_s",
                    "admitted_per_s",
                    "cpu_us_per_call",
                    "requests_per_call",
                    "wcu_per_admitted",
                ),
            ),
            "rounds": rounds[kind],
        }
    return out


HOT_SECONDS = 3.0


def run_hot(
    workers: dict[str, WorkerProcess],
    seconds: float = HOT_SECONDS,
    levels: tuple[int, ...] = HOT_TASKS,
) -> dict[str, Any]:
    """One hot bucket far below its limit: admitted/s at 1, 8, 32 and 64 tasks, both sides.

    Each level runs twice per side, in the order A B B A, and sums the two: the engine keeps
    warming up through the phase (its JIT), which would otherwise favour whoever goes second.
    An unmeasured second per side comes first for the same reason."""
    out: dict[str, Any] = {}
    for impl in alternate(0):
        workers[impl].call("hot_item", tasks=1, seconds=1.0)
    turns = itertools.count()
    for tasks in levels:
        first = alternate(next(turns))
        runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in first}
        for impl in first + first[::-1]:
            runs[impl].append(workers[impl].call("hot_item", tasks=tasks, seconds=seconds))
        row: dict[str, Any] = {impl: summed_hot_runs(results) for impl, results in runs.items()}
        for impl in first:
            result = row[impl]
            log(
                f"hot item {tasks} tasks {impl}: {result['admitted_per_s']:.0f} admitted/s, "
                f"{result['rejected']} rejected, errors {result['errors']}, "
                f"load {os.getloadavg()[0]:.1f}"
            )
        row["ratio"] = row["ours"]["admitted_per_s"] / max(row["theirs"]["admitted_per_s"], 1e-9)
        out[str(tasks)] = row
    return out


def summed_hot_runs(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Two runs of one side at one level as one: counts and time summed, the rate recomputed."""
    total = dict(results[0])
    for key in ("admitted", "rejected", "wall_s", "wire_requests", "wire_rcu", "wire_wcu"):
        total[key] = sum(r[key] for r in results)
    total["errors"] = dict(sum((Counter(r["errors"]) for r in results), Counter()))
    total["admitted_per_s"] = total["admitted"] / total["wall_s"]
    return total


# --- main --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ours vs zae-limiter 0.17.0 on DynamoDB Local")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument(
        "--phases",
        default=",".join(ALL_PHASES),
        help=f"comma-separated subset of {','.join(ALL_PHASES)}",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument(
        "--calls", type=int, help="timing calls per case per implementation (both cases)"
    )
    parser.add_argument("--block", type=int, help="timing calls per alternating block")
    parser.add_argument(
        "--manifest-entities",
        type=int,
        nargs="+",
        help="entities of the manifest phase's manifests (default 150 1000; 20 quick)",
    )
    parser.add_argument(
        "--name", help="the results' file stem (default: the date, with -quick for a quick run)"
    )
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    overrides = {
        k: v
        for k, v in (
            ("calls_single", args.calls),
            ("calls_three", args.calls),
            ("block", args.block),
        )
        if v
    }
    plan = replace(plan, **overrides)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]

    started = time.time()
    theirs_python = ensure_theirs_venv()
    results: dict[str, Any] = {
        "meta": {
            "date": dt.date.today().isoformat(),
            "started": dt.datetime.now().isoformat(timespec="seconds"),
            "mode": "quick" if args.quick else "full",
            "plan": asdict(plan),
            "phases": phases,
            "machine_start": machine(),
        }
    }
    scale_plan = run_scale.QUICK_SCALE if args.quick else run_scale.FULL_SCALE
    if args.manifest_entities:
        scale_plan = replace(scale_plan, manifest_entities=tuple(args.manifest_entities))
    results["meta"]["scale_plan"] = asdict(scale_plan)
    runs: dict[str, Callable[[dict[str, WorkerProcess], Spawner], Any]] = {
        "costs": lambda workers, _: run_costs(workers),
        "timing": lambda workers, _: run_timing(workers, plan),
        "contention": lambda workers, _: run_contention(workers, plan),
        "hot": lambda workers, _: (
            run_hot(workers, 1.0, (1, 32)) if args.quick else run_hot(workers)
        ),
        "outage": lambda workers, _: outage.bench_phase(
            20 if args.quick else 40, workers["theirs"]
        ),
        "concurrency": lambda workers, _: (
            concurrency_cpu.bench_phase(3, 200) if args.quick else concurrency_cpu.bench_phase()
        ),
        "regions": lambda workers, _: regions.bench_phase(args.quick),
        "fleet": lambda workers, _: fleet.bench_phase(workers, quick=args.quick),
        "overload": lambda workers, _: overload.bench_phase(
            workers, overload.quick_rows() if args.quick else overload.rows()
        ),
        **run_scale.phases(scale_plan, log),
    }
    results["meta"]["load_before"] = {}
    for group in session_groups([p for p in runs if p in phases], quick=args.quick):
        with fresh_session(theirs_python) as (workers, spawn):
            results["meta"].setdefault(
                "libraries", {impl: workers[impl].call("info") for impl in IMPLS}
            )
            for phase in group:
                results["meta"]["load_before"][phase] = list(os.getloadavg())
                t0 = time.time()
                log(f"phase {phase}")
                results[phase] = runs[phase](workers, spawn)
                results["meta"][f"{phase}_s"] = round(time.time() - t0, 1)
                if phase == "timing":  # whole percentiles: enough to redraw the plot
                    timing = results["timing"]
                    timing["latency_percentiles_us"] = report.latency_percentiles(
                        timing.pop("latencies_us")
                    )
                checkpoint(results, args.out, args.name)
    results["meta"]["machine_end"] = machine()
    results["meta"]["duration_s"] = round(time.time() - started, 1)
    paths = write(results, args.out, args.name)
    log(f"done in {results['meta']['duration_s']} s: " + ", ".join(str(p) for p in paths))
    return 0


def session_groups(phases: list[str], *, quick: bool) -> list[list[str]]:
    """Phases that share one DynamoDB Local: each its own in a full run; a quick run (a smoke
    run, where each engine start would cost several seconds of its budget) shares one."""
    return [phases] if quick and phases else [[p] for p in phases]


def json_path(results: dict[str, Any], out: Path, name: str | None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    stem = name or results["meta"]["date"] + (
        "-quick" if results["meta"]["mode"] == "quick" else ""
    )
    return out / f"{stem}.json"


def checkpoint(results: dict[str, Any], out: Path, name: str | None) -> None:
    """The results so far, after each phase: an interrupted run keeps what it measured
    (`python -m benchmarks.report FILE.json` draws its report)."""
    json_path(results, out, name).write_text(json.dumps(results, indent=1) + "\n")


def write(results: dict[str, Any], out: Path, name: str | None = None) -> list[Path]:
    return report.write(results, json_path(results, out, name))


if __name__ == "__main__":
    sys.exit(main())
