"""One worker process of a concurrency-hold history:
`python -m support.history.hold_worker '<json settings>'` (started by `runner.run_workers`).

Like `worker`, behind its own fault proxy with a skewed clock, but each task takes a lease of one
unit of a concurrency limit, holds it for a random time up to 1.5 x lease_ttl, and exits. Logged
(real time, seconds): ``held`` when the acquire returned (with the entry the hold is on),
``leave`` when the exit is invoked (with `hold_lost`), ``left`` when it returned, ``refused``,
``unavailable``; ``entry`` for every entry a landed write set, with its expiry in real time
(the holder counts a hold as lost from then on), so a killed process's holds can be timed;
``wrote`` for every landed write (planned and received, real time, and the entries its image
shows), so when a dead hold was freed, and by which write, can be checked; ``partition`` when
the worker opens one of its proxy's partitions (after a drawn number of started operations).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from support.history.worker import connected, run_tasks
from support.history.workload import Log
from zae_limiter import RateLimiter, RateLimiterUnavailable, RateLimitExceeded
from zae_limiter.acquire.lease import holds_of

ENTITY, RESOURCE, LIMIT = "u1", "llm", "parallel"


def entry_of(lease: Any) -> str:
    """The entry the lease's hold is on (core.hold_ledger)."""
    child = holds_of(lease)[RESOURCE].child
    return "" if child is None else child.held.get(LIMIT, "")


async def hold_once(
    limiter: RateLimiter,
    log: Any,
    op: str,
    rng: random.Random,
    ttl: float,
    now: Callable[[], float] = time.time,
) -> None:
    """Take one unit, hold it a random time up to 1.5 x `ttl`, give it back; every step logged
    at `now` (seconds: the wall clock, or the simulation's)."""
    acquisition = limiter.acquire(ENTITY, RESOURCE, {LIMIT: 1})
    try:
        lease = await acquisition.__aenter__()
    except RateLimitExceeded:
        log.write({"e": "refused", "op": op, "t": now()})
        return
    except RateLimiterUnavailable:
        log.write({"e": "unavailable", "op": op, "t": now()})
        return
    log.write({"e": "held", "op": op, "t": now(), "key": entry_of(lease)})
    await asyncio.sleep(rng.uniform(0, 1.5 * ttl))
    log.write({"e": "leave", "op": op, "t": now(), "lost": lease.hold_lost})
    try:
        await acquisition.__aexit__(None, None, None)
    except RateLimiterUnavailable:
        log.write({"e": "left", "op": op, "t": now(), "ok": False})
        return
    log.write({"e": "left", "op": op, "t": now(), "ok": True})


async def run(settings: dict[str, Any]) -> None:
    name, offset = settings["name"], settings["offset_ms"]
    ttl = settings["lease_ttl"]
    with open(settings["log"], "a", encoding="utf-8") as stream:
        log = Log(stream)
        async with connected(settings) as (proxy, repo):
            if repo is None:
                return
            ledger = repo.scope.admission.ledger
            ledger.on_written = lambda key, expiry: log.write(
                {"e": "entry", "key": key, "expiry": (expiry - offset) / 1000}
            )
            ledger.on_landed = lambda now, received, keys: log.write(
                {"e": "wrote", "t": (now - offset) / 1000, "rt": (received - offset) / 1000,
                 "keys": keys}
            )  # fmt: skip
            limiter = RateLimiter(repo)
            try:
                await run_tasks(
                    settings,
                    proxy,
                    lambda op, rng: hold_once(limiter, log, op, rng, ttl),
                    lambda seconds: log.write({"e": "partition", "t": time.time(), "s": seconds}),
                )
            finally:
                log.write({"e": "stats", "name": name, "faults": dict(proxy.counts)})
                await repo.close()


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
