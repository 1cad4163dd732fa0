"""Run a history: start the workers, kill and replace some, wait, collect the logs.

Every choice (each process's clock offset, its partitions, when a process is killed and which)
comes from `Run.seed`, and the run is bounded: each worker stops at `until` (or after `ops`
operations per task), and the runner SIGKILLs whatever is still alive `grace_s` later. Every
process it started is gone when `run_workers` returns or raises.
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
from typing import Any

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
    seconds: float
    ops: int  # per task and process, at most
    limits: Limits
    rate: float = 0.4  # of writes faulted, shared evenly by `kinds` (10 % each)
    kinds: tuple[str, ...] = KINDS
    kills: int = 1
    skew_ms: int = 500
    partitions: int = 1  # per process
    partition_s: float = 2.0
    read_timeout: float = 0.5
    pause_s: float = 0.02  # a task's pause between operations, at most
    rejection_cache_ttl: float = 1.0  # the library's default: repeated rejections answered locally
    grace_s: float = 30.0
    kill_window: tuple[float, float] = (0.15, 0.75)  # kills fall in this part of the run
    worker: str = "support.history.worker"  # the worker's module (its workload)
    extra: tuple[tuple[str, Any], ...] = ()  # more settings for that worker


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


def run_workers(run: Run, endpoint: str, table: str, workdir: Path) -> Ran:
    """Run the history's processes to their end (see the module docstring)."""
    rng = random.Random(run.seed)
    ran = Ran(run, started=time.time())
    until = ran.started + run.seconds
    env = {**os.environ, **ISOLATED_AWS_ENV, "PYTHONPATH": str(TESTS_DIR)}

    def start(slot: int, generation: int) -> Worker:
        name = f"p{slot}g{generation}"
        now = time.time()
        partitions = sorted(
            (now + rng.uniform(0.05, 0.85) * (until - now), run.partition_s)
            for _ in range(run.partitions)
        )
        settings: dict[str, Any] = {
            "name": name,
            "endpoint": endpoint,
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

    kill_at = sorted(
        ran.started + rng.uniform(*run.kill_window) * run.seconds for _ in range(run.kills)
    )
    live = {slot: start(slot, 0) for slot in range(run.processes)}
    try:
        for generation, moment in enumerate(kill_at, start=1):
            time.sleep(max(0.0, moment - time.time()))
            slot = rng.choice(sorted(live))
            victim = live[slot]
            if victim.process.poll() is None:
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
                victim.killed = True
            live[slot] = start(slot, generation)
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


def worker_errors(ran: Ran) -> list[str]:
    """Workers that ended badly on their own (not killed): the tail of their stderr."""
    out = []
    for worker in ran.workers:
        if not (worker.killed or worker.late) and worker.process.returncode != 0:
            tail = worker.log.with_suffix(".err").read_text(errors="replace")[-2000:]
            out.append(f"{worker.name} exited {worker.process.returncode}: {tail}")
    return out
