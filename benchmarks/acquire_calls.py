"""Python calls, event-loop turns and tasks per warm acquire: a deterministic CPU proxy.

    .venv/bin/python -m benchmarks.acquire_calls [--calls 200] [--endpoint URL]

Counts, with `sys.setprofile` and a wrapper around the loop's `_run_once`, what `--calls` warm
single-resource acquires (one UpdateItem each, through the real HTTP exchange) execute, divided
by the calls (`own`: those of the package's own functions, which
`tests/test_cpu_budget.py` holds to a budget). Without `--endpoint` it starts DynamoDB Local;
with it, it uses that engine, so an earlier tree can be counted by the same script against an
engine this tree started:

    git archive 9bc42c7^1 runtime | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/runtime .venv/bin/python -m benchmarks.acquire_calls --endpoint URL

Only the public API the trees share is used. Wall time is never measured: the counts move only
when the code does (a call more per acquire is a call more, whatever the machine's load).
`--by-function` prints the calls per acquire of each function (folder/file:name), to diff two
trees. `--kind rate` / `--kind held` count the two calls the `concurrency` phase times
(`benchmarks.concurrency_cpu.one_call`: a rate limit with `adjust`, a concurrency limit given
back; two writes each). `--walk` prints the call's walk through the package: the modules it runs
code of (in the order first entered), the calls from one module into another, and the *climbs*:
calls from a package into one on a higher floor (the floors of `tests/unit/test_import_cycles.py`),
each with its count per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

REGION = "us-east-1"
WARM = 20


def caller(limiter: Any, kind: str) -> Callable[[], Awaitable[None]]:
    """One call of `kind`: "plain" a warm acquire on a rate limit (one write); "rate" and
    "held" the two calls `benchmarks.concurrency_cpu` times (admit and exit: two writes each),
    its `one_call` on one entity."""
    if kind != "plain":
        from benchmarks.concurrency_cpu import one_call

        return lambda: one_call(limiter, kind, 0)

    async def plain() -> None:
        async with limiter.acquire("user-1", "api", {"rpm": 1}):
            pass

    return plain


def _floors() -> dict[str, int]:
    """Package -> floor, from the floors test (`tests/unit/test_import_cycles.py`)."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parent.parent / "tests" / "unit" / "test_import_cycles.py"
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "FLOORS":
            floors: dict[int, tuple[str, ...]] = ast.literal_eval(node.value)
            return {package: floor for floor, packages in floors.items() for package in packages}
    raise LookupError("no FLOORS in tests/unit/test_import_cycles.py")


def _module(filename: str) -> str | None:
    """`.../zae_limiter/acquire/lanes.py` -> `acquire/lanes`; None outside the package."""
    _, found, rest = filename.rpartition("/zae_limiter/")
    return rest.removesuffix(".py") if found else None


def _package(module: str) -> str:
    head = module.split("/")[0]
    return "zae_limiter" if head == "__init__" else head


async def count(
    endpoint: str, calls: int, by_function: bool = False, kind: str = "plain", walk: bool = False
) -> dict[str, Any]:
    from zae_limiter import Limit, RateLimiter, Repository

    table = f"calls-{uuid.uuid4().hex[:8]}"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint, region=REGION)
    limiter = RateLimiter(repo)
    if kind == "plain":
        await limiter.set_resource_defaults("api", [Limit.per_day("rpm", 10**12)])
    else:  # only this tree has it (an earlier one is counted with "plain")
        from benchmarks.concurrency_cpu import set_up

        await set_up(limiter)
    one = caller(limiter, kind)
    for _ in range(WARM):
        await one()
    loop: Any = asyncio.get_running_loop()
    seen = {"calls": 0, "own": 0, "turns": 0, "tasks": 0}
    where: Counter[str] = Counter()
    crossings: Counter[tuple[str, str]] = Counter()
    entered: dict[str, None] = {}  # modules in the order first entered
    run_once = loop._run_once

    def turn() -> None:
        seen["turns"] += 1
        run_once()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            seen["calls"] += 1
            if "/zae_limiter/" in frame.f_code.co_filename:
                seen["own"] += 1
            if by_function:
                code = frame.f_code
                where["/".join(code.co_filename.split("/")[-2:]) + ":" + code.co_name] += 1
            if walk and (callee := _module(frame.f_code.co_filename)) is not None:
                entered.setdefault(callee)
                caller = frame.f_back
                while caller is not None and _module(caller.f_code.co_filename) is None:
                    caller = caller.f_back  # through the standard library's frames
                if caller is not None and (source := _module(caller.f_code.co_filename)) != callee:
                    crossings[(str(source), callee)] += 1

    def task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        seen["tasks"] += 1
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop._run_once = turn
    loop.set_task_factory(task_factory)
    sys.setprofile(profile)
    try:
        for _ in range(calls):
            await one()
    finally:
        sys.setprofile(None)
        loop.set_task_factory(None)
        del loop._run_once
    await repo.close()
    counts: dict[str, Any] = {k: round(v / calls, 1) for k, v in seen.items()}
    if by_function:
        counts["by_function"] = {k: round(v / calls, 2) for k, v in sorted(where.items())}
    if walk:
        floor = _floors()
        climbs = {
            f"{a} -> {b}": round(n / calls, 2)
            for (a, b), n in sorted(crossings.items())
            if _package(a) != _package(b) and floor[_package(b)] > floor[_package(a)]
        }
        counts["walk"] = {
            "modules": len(entered),
            "calls between modules": round(sum(crossings.values()) / calls, 1),
            "climbs": round(sum(climbs.values()), 2),
            "modules entered": list(entered),
            "climbs by edge": climbs,
        }
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--endpoint", help="an engine already running (default: start one)")
    parser.add_argument(
        "--by-function", action="store_true", help="also the calls per acquire of each function"
    )
    parser.add_argument(
        "--walk", action="store_true", help="also the modules, module calls and climbs per call"
    )
    parser.add_argument(
        "--kind",
        choices=("plain", "rate", "held"),
        default="plain",
        help="plain: warm acquire; rate / held: the concurrency phase's two calls",
    )
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")

    def counted(endpoint: str) -> str:
        work = count(endpoint, args.calls, args.by_function, args.kind, args.walk)
        return json.dumps(asyncio.run(work))

    if args.endpoint:
        print(counted(args.endpoint))
        return
    from zae_limiter.local import start_engine

    engine = start_engine()
    try:
        print(counted(engine.endpoint_url))
    finally:
        engine.stop()


if __name__ == "__main__":
    main()
