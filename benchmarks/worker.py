"""One implementation's side of the benchmark: a JSON-lines server on stdin/stdout.

    python -m benchmarks.worker --impl ours|theirs --endpoint http://127.0.0.1:PORT

run from the repository root by the interpreter of the implementation's venv. Each request is one
line `{"op": NAME, ...arguments}`; each answer one line `{"ok": true, "result": ...}` or
`{"ok": false, "error": "..."}`. Anything the libraries print goes to stderr. Ops: info, costs,
timing_setup, timing_block, floor_setup, floor_block, contention, hot_item, outage_setup,
outage_calls (benchmarks/outage_calls.py), fleet (benchmarks/fleet.py), overload_setup, overload_run
(benchmarks/overload_calls.py), the scale phases'
(benchmarks/scale.py: spans, resources, entities, shared_setup, shared_run, shards; ours only,
benchmarks/scale_ours.py: aggregator, manifest), quit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
# The wire recorder lives with the tests (tests/support/wire.py); it needs only botocore.
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks import outage_calls, overload_calls, scale, scenarios  # noqa: E402
from benchmarks.impls import library_info, make_impl  # noqa: E402
from support.wire import WireRecorder  # noqa: E402


class Worker:
    def __init__(self, impl_name: str, endpoint_url: str) -> None:
        self.impl = make_impl(impl_name, endpoint_url)
        self.recorder = WireRecorder()
        self.recorder.install()
        self.timing: scenarios.TimingBench | None = None
        self.outage = outage_calls.Side()
        self.overload = overload_calls.Side()

    async def handle(self, op: str, args: dict[str, Any]) -> Any:
        if op == "info":
            return {"impl": self.impl.name, "pid": os.getpid(), **library_info()}
        if op == "costs":
            return await scenarios.all_costs(self.impl, self.recorder)
        if op == "timing_setup":
            self.timing = scenarios.TimingBench(self.impl)
            await self.timing.setup(int(args["warm_rounds"]))
            return None
        if op == "timing_block":
            return await self._timing().block(args["case"], int(args["n"]))
        if op == "floor_setup":
            return await self._timing().setup_floor(self.recorder)
        if op == "floor_block":
            return await self._timing().floor_block(args["case"], int(args["n"]))
        if op == "contention":
            return await scenarios.contention(
                self.impl,
                self.recorder,
                args["kind"],
                tasks=int(args["tasks"]),
                attempts=int(args["attempts"]),
                capacity=int(args["capacity"]),
            )
        if op == "hot_item":
            return await scenarios.hot_item(
                self.impl, self.recorder, tasks=int(args["tasks"]), seconds=float(args["seconds"])
            )
        if op == "outage_setup":
            return await self.outage.setup(self.impl.name, **args)
        if op == "outage_calls":
            return await self.outage.calls(**args)
        if op == "fleet":
            from benchmarks import fleet

            return await fleet.fleet(
                self.impl,
                self.recorder,
                levels=tuple(int(n) for n in args["levels"]),
                loop_writers=int(args["loop_writers"]),
                loop_rounds=int(args["loop_rounds"]),
            )
        if op == "overload_setup":
            return await self.overload.setup(self.impl.name, **args)
        if op == "overload_run":
            return await self.overload.run(float(args["seconds"]), self.recorder)
        if op in SCALE_OPS:
            return await SCALE_OPS[op](self, args)
        raise ValueError(f"unknown op {op!r}")

    def _timing(self) -> scenarios.TimingBench:
        if self.timing is None:
            raise RuntimeError("timing_setup first")
        return self.timing

    async def close(self) -> None:
        await self.outage.close()
        await self.overload.close()
        if self.timing is not None:
            await self.timing.close()


async def _resources(worker: Worker, args: dict[str, Any]) -> Any:
    return await scale.resources_per_call(
        worker.impl, worker.recorder, count=int(args["count"]), calls=int(args["calls"])
    )


async def _entities(worker: Worker, args: dict[str, Any]) -> Any:
    return await scale.entities_growth(
        worker.impl,
        worker.recorder,
        levels=[int(n) for n in args["levels"]],
        sample=int(args["sample"]),
    )


async def _shared_setup(worker: Worker, args: dict[str, Any]) -> Any:
    return await scale.shared_setup(worker.impl, **args)


async def _shared_run(worker: Worker, args: dict[str, Any]) -> Any:
    return await scale.shared_run(worker.impl, worker.recorder, **args)


async def _shards(worker: Worker, args: dict[str, Any]) -> Any:
    """Ours only: the shard count of each of a bucket's limits (1 = never split)."""
    repo = await worker.impl.open(args["table"])
    try:
        states = await repo.get_buckets(args["entity"], args["resource"])
        return max((s.shard_count for s in states), default=0)
    finally:
        await repo.close()


async def _aggregator(worker: Worker, args: dict[str, Any]) -> Any:
    from benchmarks import scale_ours

    return await scale_ours.aggregator_batches(
        worker.impl.endpoint_url, worker.recorder, sizes=tuple(int(n) for n in args["sizes"])
    )


async def _manifest(worker: Worker, args: dict[str, Any]) -> Any:
    from benchmarks import scale_ours

    return await scale_ours.manifest_apply(
        worker.impl.endpoint_url, worker.recorder, entities=int(args["entities"])
    )


async def _spans(worker: Worker, args: dict[str, Any]) -> Any:
    from benchmarks.breakdown import call_spans

    return await call_spans(worker._timing().caller(args["case"]), int(args["n"]))


async def _variant_spans(worker: Worker, args: dict[str, Any]) -> Any:
    from benchmarks.breakdown import variant_spans

    bench = worker._timing()
    (request,) = bench.floor["single"]
    return await variant_spans(
        await worker.impl.client(bench.repo), request, args["which"], int(args["n"])
    )


SCALE_OPS = {
    "spans": _spans,
    "variant_spans": _variant_spans,
    "resources": _resources,
    "entities": _entities,
    "shared_setup": _shared_setup,
    "shared_run": _shared_run,
    "shards": _shards,
    "aggregator": _aggregator,
    "manifest": _manifest,
}


def serve(worker: Worker, requests: TextIO, answers: TextIO) -> None:
    with asyncio.Runner() as runner:  # one loop for the worker's life: clients are bound to it
        try:
            for line in requests:
                if not line.strip():
                    continue
                message = json.loads(line)
                op = message.pop("op")
                if op == "quit":
                    break
                try:
                    answer = {"ok": True, "result": runner.run(worker.handle(op, message))}
                except Exception as exc:
                    traceback.print_exc(file=sys.stderr)
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                answers.write(json.dumps(answer) + "\n")
                answers.flush()
        finally:
            runner.run(worker.close())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=("ours", "theirs"), required=True)
    parser.add_argument("--endpoint", required=True)
    args = parser.parse_args()
    trace = os.environ.get("ZAEL_BENCH_LANE_TRACE")
    if trace and args.impl == "ours":
        from benchmarks import lane_trace

        lane_trace.install(f"{trace}.{os.getpid()}.jsonl")
    answers = sys.stdout
    sys.stdout = sys.stderr  # keep the protocol channel for answers only
    serve(Worker(args.impl, args.endpoint), sys.stdin, answers)


if __name__ == "__main__":
    main()
