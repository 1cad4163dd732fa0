"""Run a history: start the workers, kill and replace some, wait, collect the logs.

With `generations` above 1 writers come and go as Lambda containers do: a worker that ends its
operations exits (closing its repository) and a new process, a new writer, takes its slot, until
each slot has run that many.

Every choice (each process's clock offset, its partitions, when a process is killed and which)
comes from `Run.seed`. The run is driven by operations, not by the wall clock, so a loaded
machine runs the same history, only slower: each task stops after `ops` operations, a process is
killed once the workers have started a drawn share of the run's operations, and a worker opens
its partitions at drawn operation counts. `seconds` only bounds a run that stalls: each worker
stops at `until`, and the runner SIGKILLs whatever is still alive `grace_s` later. Every process
it started is gone when `run_workers` returns or raises.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from support.faultproxy import KINDS
from support.history.workload import Limits
from zae_limiter.local.engine import ISOLATED_AWS_ENV

TESTS_DIR = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Run:
    """One history's settings (the report prints them)."""

    seed: int
    processes: int
    tasks: int
    seconds: float  # a bound for a stalled run only: it ends by `ops`
    ops: int  # per task and process (a replacement process runs them again)
    limits: Limits
    rate: float = 0.4  # of writes faulted, shared evenly by `kinds` (10 % each)
    kinds: tuple[str, ...] = KINDS
    kills: int = 1
    skew_ms: int = 500
    partitions: int = 1  # per process
    partition_s: float = 2.0
    #: Where a process's partitions open, as a share of the operations it plans.
    partition_span: tuple[float, float] = (0.05, 0.85)
    read_timeout: float = 0.5
    pause_s: float = 0.02  # a task's pause between operations, at most
    rejection_cache_ttl: float = 1.0  # the library's default: repeated rejections answered locally
    #: No deadline: a call waits for its outcome (at most the re-send bound), as in the
    #: exactly-once tests. The 1 s default, missed by calls queued on a loaded machine, made
    #: nearly every operation of a run "unknown" (123,633 operations, 1 ok, at load 13).
    acquire_timeout: float | None = None
    #: Of the calls, those whose caller is cancelled after a drawn delay (up to `cancel_s`).
    cancel_rate: float = 0.0
    cancel_s: float = 0.5
    grace_s: float = 30.0
    kill_span: tuple[float, float] = (0.15, 0.75)  # kills fall in this part of the run
    #: What "part of the run" counts: the operations the workers started (their logs' invoke
    #: lines; deterministic under load) or, for a worker whose log has none, seconds.
    kill_by: Literal["operations", "seconds"] = "operations"
    #: Which process a kill takes: any live one, or one whose log shows a lease it holds
    #: ("held" lines not yet followed by "leave"), waiting for one to hold if none does.
    victims: Literal["any", "holding"] = "any"
    worker: str = "support.history.worker"  # the worker's module (its workload)
    #: Simulated Regions (support/regions.py): process slot i runs in Region i % len(regions),
    #: through that Region's endpoint (region_runs.py).
    regions: tuple[str, ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()  # more settings for that worker
    #: Processes each slot runs one after another (each a new writer, `ops` a task).
    generations: int = 1


@dataclass
class Worker:
    name: str
    log: Path
    offset_ms: int
    process: subprocess.Popen[bytes]
    killed: bool = False  # by the schedule
    late: bool = False  # still running `grace_s` after the end: killed then


@dataclass
class Ran:
    """What a run did: every worker (killed ones too) and when it ended."""

    run: Run
    workers: list[Worker] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0

    @property
    def logs(self) -> list[Path]:
        return [w.log for w in self.workers]

    @property
    def kills(self) -> int:
        return sum(w.killed for w in self.workers)

    @property
    def skew_spread_ms(self) -> int:
        offsets = [w.offset_ms for w in self.workers]
        return max(offsets) - min(offsets)


class _Started:
    """Operations the workers have started, read from their logs as they grow."""

    def __init__(self) -> None:
        self._read: dict[Path, int] = {}
        self.count = 0

    def update(self, logs: list[Path]) -> int:
        for path in logs:
            if not path.exists():
                continue
            with open(path, "rb") as stream:
                stream.seek(self._read.get(path, 0))
                data = stream.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
            self._read[path] = self._read.get(path, 0) + len(whole)
            self.count += whole.count(b'"e":"invoke"')
        return self.count


def run_workers(run: Run, endpoint: str | dict[str, str], table: str, workdir: Path) -> Ran:
    """Run the history's processes to their end (see the module docstring). `endpoint`: one
    for every process, or one per Region of `run.regions`."""
    rng = random.Random(run.seed)
    ran = Ran(run, started=time.time())
    until = ran.started + run.seconds
    env = {**os.environ, **ISOLATED_AWS_ENV, "PYTHONPATH": str(TESTS_DIR)}
    per_worker = run.tasks * run.ops

    def start(slot: int, generation: int) -> Worker:
        name = f"p{slot}g{generation}"
        region = run.regions[slot % len(run.regions)] if run.regions else None
        placed = {"region": region} if region else {}
        partitions = sorted(
            (int(rng.uniform(*run.partition_span) * per_worker), run.partition_s)
            for _ in range(run.partitions)
        )
        settings: dict[str, Any] = {
            "name": name,
            "endpoint": endpoint[region] if isinstance(endpoint, dict) and region else endpoint,
            **placed,
            "table": table,
            "seed": rng.randrange(2**32),
            "log": str(workdir / f"{name}.jsonl"),
            "offset_ms": rng.randint(-run.skew_ms, run.skew_ms),
            "tasks": run.tasks,
            "ops": run.ops,
            "until": until,
            "rate": run.rate,
            "kinds": list(run.kinds),
            "read_timeout": run.read_timeout,
            "pause_s": run.pause_s,
            "rejection_cache_ttl": run.rejection_cache_ttl,
            "acquire_timeout": run.acquire_timeout,
            "cancel_rate": run.cancel_rate,
            "cancel_s": run.cancel_s,
            "partitions": partitions,
            **dict(run.extra),
        }
        with open(workdir / f"{name}.err", "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-m", run.worker, json.dumps(settings)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        worker = Worker(name, Path(settings["log"]), settings["offset_ms"], process)
        ran.workers.append(worker)
        return worker

    marks = sorted(rng.uniform(*run.kill_span) for _ in range(run.kills))
    started = _Started()
    planned = run.processes * run.generations * per_worker
    born = {slot: 1 for slot in range(run.processes)}  # processes each slot started

    def renew(live: dict[int, Worker]) -> bool:
        """A worker that ended its operations on its own gives its slot to a new process.
        Whether a process is still running (or was just started)."""
        for slot, worker in live.items():
            ended = worker.process.poll() == 0 and not worker.killed
            if ended and born[slot] < run.generations and time.time() < until:
                live[slot] = start(slot, 100 * born[slot])
                born[slot] += 1
        return time.time() < until and any(w.process.poll() is None for w in live.values())

    def reached(share: float) -> bool:
        if run.kill_by == "seconds":
            return time.time() >= ran.started + share * run.seconds
        return started.update(ran.logs) >= int(share * planned)

    live = {slot: start(slot, 0) for slot in range(run.processes)}
    try:
        for generation, share in enumerate(marks, start=1):
            while not (reached(share) and _victims(run, live)) and renew(live):
                time.sleep(0.05)
            if not renew(live):
                break  # a stalled run, or every worker ended: no more kills
            slot = rng.choice(_victims(run, live))
            victim = live[slot]
            victim.process.send_signal(signal.SIGKILL)
            victim.process.wait()
            victim.killed = True
            live[slot] = start(slot, generation)
        while any(born[s] < run.generations for s in live) and renew(live):
            time.sleep(0.05)
        deadline = until + run.grace_s
        for worker in live.values():
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:  # still settling: its open operations stay unknown
                worker.process.send_signal(signal.SIGKILL)
                worker.process.wait()
                worker.late = True
    finally:
        for worker in ran.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGKILL)
                worker.process.wait()
    ran.ended = time.time()
    return ran


def _victims(run: Run, live: dict[int, Worker]) -> list[int]:
    alive = sorted(s for s, w in live.items() if w.process.poll() is None)
    if run.victims == "any":
        return alive
    return [s for s in alive if _holding(live[s].log)]


def _holding(log: Path) -> bool:
    if not log.exists():
        return False
    text = log.read_bytes()
    return text.count(b'"e":"held"') > text.count(b'"e":"leave"')


def worker_errors(ran: Ran) -> list[str]:
    """Workers that ended badly on their own (not killed): the tail of their stderr."""
    out = []
    for worker in ran.workers:
        if not (worker.killed or worker.late) and worker.process.returncode != 0:
            tail = worker.log.with_suffix(".err").read_text(errors="replace")[-2000:]
            out.append(f"{worker.name} exited {worker.process.returncode}: {tail}")
    return out
