"""One worker process of a history: `python -m support.history.worker '<json settings>'`.

It opens a `Repository` (a new writer) behind its own fault proxy, with its clock skewed by
`offset_ms`, runs `tasks` asyncio tasks of `workload.one_op` until each has done `ops` operations
(or, in a stalled run, the wall clock passes `until`), opens a partition of the proxy when its
tasks have started the operation count each of `partitions` names, and logs everything to `log`
(see workload.py), with a ``stats`` line (faults by kind, undecided writes) every second.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from botocore.config import Config

from support.faultproxy import fault_proxy
from support.history.workload import Log, one_op
from zae_limiter import RateLimiter, RateLimiterUnavailable, Repository
from zae_limiter.core import evidence as evidence_rules


def skewed_clock(offset_ms: int) -> Any:
    """The injectable clock of a process whose clock is `offset_ms` off."""

    def clock() -> int:
        return int(time.time() * 1000) + offset_ms

    return clock


@asynccontextmanager
async def connected(settings: dict[str, Any]) -> AsyncIterator[tuple[Any, Repository | None]]:
    """The process's fault proxy and a Repository opened through it, with the skewed clock
    (None when `until` passed before it could open: a partition or a slow engine). A run's
    `evidence` settings replace the evidence rules' constants (core/evidence.py) in this
    process: a small history reaches an item's entry bound with a few writers."""
    for name, value in settings.get("evidence", {}).items():
        assert hasattr(evidence_rules, name), name
        setattr(evidence_rules, name, value)
    until = settings["until"]
    async with fault_proxy(
        settings["endpoint"],
        seed=settings["seed"],
        rate=settings["rate"],
        kinds=tuple(settings["kinds"]),
        delay_s=settings["read_timeout"] + 0.3,
        max_faults=10**9,
        seconds=until - time.time(),
    ) as proxy:
        repo = None
        while repo is None and time.time() <= until:
            try:
                repo = await Repository.open(
                    table=settings["table"],
                    endpoint_url=proxy.url,
                    region=settings.get("region"),  # a simulated Region's (region_runs.py)
                    clock=skewed_clock(settings["offset_ms"]),
                    rejection_cache_ttl=settings["rejection_cache_ttl"],
                    acquire_timeout=settings["acquire_timeout"],
                    client_config=Config(read_timeout=settings["read_timeout"], connect_timeout=1),
                )
            except RateLimiterUnavailable:
                await asyncio.sleep(0.5)
        yield proxy, repo


async def run_tasks(
    settings: dict[str, Any],
    proxy: Any,
    operation: Callable[[str, random.Random], Awaitable[None]],
    on_partition: Callable[[float], None] = lambda seconds: None,
) -> None:
    """The process's tasks, each running `operation` up to `ops` times until `until`, with a
    pause between operations; the proxy's partitions open after their drawn number of started
    operations (`on_partition` is told each one's length first)."""
    name, until = settings["name"], settings["until"]
    partitions = [tuple(p) for p in settings["partitions"]]  # (after ops, seconds)
    started = 0

    async def task(index: int) -> None:
        nonlocal started
        rng = random.Random(f"{settings['seed']}/{name}/{index}")
        for op in range(settings["ops"]):
            if time.time() > until:
                return
            started += 1
            while partitions and partitions[0][0] <= started:
                seconds = partitions.pop(0)[1]
                on_partition(seconds)
                proxy.partition(seconds)
            await operation(f"{name}-{index}-{op}", rng)
            await asyncio.sleep(rng.uniform(0, settings["pause_s"]))

    await asyncio.gather(*(task(i) for i in range(settings["tasks"])))


async def cancelled_or_not(
    call: Coroutine[Any, Any, None], log: Log, op: str, rng: random.Random,
    settings: dict[str, Any],
) -> None:  # fmt: skip
    """`call`, whose caller is cancelled after a drawn delay for `cancel_rate` of the calls
    (its outcome is then unknown: logged so)."""
    task = asyncio.ensure_future(call)
    if rng.random() < settings.get("cancel_rate", 0.0):
        asyncio.get_running_loop().call_later(rng.uniform(0, settings["cancel_s"]), task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.write({"e": "unknown", "op": op, "t": time.time(),
                   "error": "the caller was cancelled"})  # fmt: skip


async def run(settings: dict[str, Any]) -> None:
    name = settings["name"]
    with open(settings["log"], "a", encoding="utf-8") as stream:
        log = Log(stream)
        async with connected(settings) as (proxy, repo):
            if repo is None:
                return
            limiter = RateLimiter(repo)

            lanes = repo.scope.admission.waves.lanes

            def stats(closed: bool = False) -> None:
                cache = repo.get_cache_stats()
                log.write({"e": "stats", "name": name, "requests": proxy.requests,
                           "faults": dict(proxy.counts), "undecided": cache.undecided_writes,
                           "skewed": cache.skewed_items, "unkept": lanes.unkept,
                           "local_rejections": cache.local_rejections, "closed": closed,
                           "abandoned": cache.abandoned_at_close})  # fmt: skip

            async def report() -> None:
                while True:
                    stats()
                    await asyncio.sleep(1.0)

            side = asyncio.create_task(report())
            try:
                await run_tasks(settings, proxy, lambda op, rng: cancelled_or_not(
                    one_op(limiter, log, op, rng), log, op, rng, settings))  # fmt: skip
            finally:
                side.cancel()
                stats()
                await repo.close()
                stats(closed=True)  # every write resolved, or counted abandoned or undecided


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
