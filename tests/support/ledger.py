"""A client-side ledger of what concurrent acquires took, and the workloads that fill it.

Each task draws its moves from its own seeded generator: a plain acquire, one with an `adjust`
(up or down), one with a `consume()` inside, or one whose block raises (refunded). The ledger adds
what each lease finally kept per (entity, resource, limit); anything that raised is not added.
`compare` reads every bucket back and returns the mismatches (empty when exact).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.config import Config

from zae_limiter import (
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
)


class Boom(Exception):
    """Raised inside a block: the lease must be refunded."""


BucketKey = tuple[str, str, str]  # entity, resource, limit


@dataclass
class Ledger:
    kept: Counter[BucketKey] = field(default_factory=Counter)
    admitted: int = 0  # acquires that entered their block
    rejected: int = 0
    contended: int = 0  # rejections that said "contended"
    unavailable: int = 0  # acquires or exits that raised RateLimiterUnavailable
    refunded: int = 0
    errors: list[str] = field(default_factory=list)  # the first few unavailable errors

    def add(self, entity: str, parents: dict[str, str], taken: dict[str, dict[str, int]]) -> None:
        for resource, amounts in taken.items():
            for name, amount in amounts.items():
                self.kept[(entity, resource, name)] += amount
                parent = parents.get(resource)
                if parent is not None:
                    self.kept[(parent, resource, name)] += amount


@dataclass(frozen=True)
class Workload:
    """Who acquires what: `entities` with `consume` on `resource` (and `also`)."""

    entities: tuple[str, ...]
    resource: str
    consume: dict[str, int]
    also: dict[str, dict[str, int]] = field(default_factory=dict)
    parents: dict[str, str] = field(default_factory=dict)  # resource -> cascade parent id
    ghost: str | None = None  # an entity whose every block raises: must be left untouched
    adjustable: str = ""  # the limit adjust/consume() move (default: the last consumed)


async def one_call(
    limiter: RateLimiter, work: Workload, ledger: Ledger, rng: random.Random
) -> None:
    """One acquire with a random move inside; the ledger learns what it kept."""
    ghost = work.ghost is not None and rng.random() < 0.15
    entity = work.ghost if ghost and work.ghost else rng.choice(work.entities)
    move = "raise" if ghost else rng.choice(("plain", "adjust", "consume", "raise"))
    name = work.adjustable or list(work.consume)[-1]
    taken = {work.resource: dict(work.consume), **{r: dict(a) for r, a in work.also.items()}}
    try:
        async with limiter.acquire(
            entity, work.resource, dict(work.consume), also=work.also or None
        ) as lease:
            ledger.admitted += 1
            if move == "adjust":
                delta = rng.randint(-work.consume[name], 3)
                await lease.adjust(**{name: delta})
                taken[work.resource][name] = max(0, taken[work.resource][name] + delta)
            elif move == "consume":
                await lease.consume(**{name: 2})
                taken[work.resource][name] += 2
            elif move == "raise":
                raise Boom()
    except Boom:
        ledger.refunded += 1
        return
    except RateLimitExceeded as exc:
        ledger.rejected += 1
        ledger.contended += int(exc.contended)
        return
    except RateLimiterUnavailable as exc:
        ledger.unavailable += 1
        if len(ledger.errors) < 5:
            ledger.errors.append(f"{exc!r} <- {exc.__cause__!r}")
        return
    ledger.add(entity, work.parents, taken)


async def open_behind(
    url: str,
    table: str,
    *,
    read_timeout: float,
    clock: Callable[[], int] | None = None,
    rejection_cache_ttl: float = 1.0,
) -> Repository:
    """A Repository on `table` reached through `url` (a fault proxy), with a short read timeout
    so that held answers turn into unknown outcomes quickly, and no deadline: callers wait for
    their outcomes to be resolved (the exactly-once rules on the caller's path)."""
    return await Repository.open(
        table=table,
        endpoint_url=url,
        clock=clock,
        rejection_cache_ttl=rejection_cache_ttl,
        client_config=Config(read_timeout=read_timeout, connect_timeout=1),
        acquire_timeout=None,
    )


async def run_tasks(
    limiters: list[RateLimiter], work: Workload, *, tasks: int, calls: int, seed: int
) -> Ledger:
    """`tasks` tasks on each limiter (one per process), `calls` acquires each."""
    ledger = Ledger()

    async def task(limiter: RateLimiter, rng: random.Random) -> None:
        for _ in range(calls):
            await one_call(limiter, work, ledger, rng)

    await asyncio.gather(
        *(
            task(limiter, random.Random(f"{seed}/{p}/{t}"))
            for p, limiter in enumerate(limiters)
            for t in range(tasks)
        )
    )
    return ledger


async def compare(
    repo: Repository, work: Workload, ledger: Ledger, limits: dict[BucketKey, Limit]
) -> dict[BucketKey, tuple[int, int]]:
    """Every bucket of `limits`: (ledger, stored consumption) where they differ, and where the
    stored balance is not capacity minus consumption (the clock is fixed: no refill)."""
    wrong: dict[BucketKey, tuple[int, int]] = {}
    entities = {key[0] for key in limits}
    for entity in sorted(entities):
        stored = {
            (b.entity_id, b.resource, b.limit_name): b for b in await repo.get_buckets(entity)
        }
        for key, limit in limits.items():
            if key[0] != entity:
                continue
            state = stored.get(key)
            consumed = state.total_consumed if state else 0
            tokens = state.tokens if state else limit.capacity
            if consumed != ledger.kept[key]:
                wrong[key] = (ledger.kept[key], consumed)
            elif tokens != limit.capacity - consumed:
                wrong[key] = (limit.capacity - ledger.kept[key], tokens)
    return wrong
