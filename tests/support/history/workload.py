"""What a history's tasks do, and the two log lines each operation leaves.

Two kinds of call, as in the seed's tests (tests/behaviour/test_costs.py, test_exactly_once.py):

- ``single``: one bucket item, ``api`` with ``{rpm: 1, tpm: 5}`` on a hot entity;
- ``three``: a user's ``api`` call cascading into its organisation, with ``also={"budget":
  {"usd": 3}}`` (which cascades too): every debit lands on several items, all or none.

Each kind has a *ghost* entity whose every call raises inside its block (refund-only). Inside a
block a task adjusts ``tpm`` (down to 0 or up by 3, forced), consumes 2 more ``tpm`` (judged
against the live balance), raises (refunded) or does nothing. The limits are tight: many times
less than what the tasks ask for, so capacity is reached over and over.

Log lines (one JSON object each, written and flushed before the call and after it):
``{"e": "invoke", "op", "t", "ent", "call", "move", "max": {bucket: most it can keep}}`` and
``{"e": "ok" | "fail" | "unknown", "op", "t", "entry", "extra", "forced", "credit", "kept"}``
(amounts per bucket ``entity|resource|limit``; an operation with no second line is unknown).
An outcome line with ``"unrefunded": true`` is a call whose block raised and whose refund stayed
undecided: the library logged *refund could not land* (docs/on-unavailable.md, "When a write
stays undecided") and let the block's exception through, so its credit may not have landed.
An outcome line with ``"exit_late": true`` is a call whose lease's exit returned at its deadline
with its write (adjustments, or the refund of a block that raised) still going on off the
caller's path (reference §5.1 item 6): it lands only if its process lives to resolve it.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO, Any

from zae_limiter import (
    Limit,
    RateLimiter,
    RateLimiterUnavailable,
    RateLimitExceeded,
    Repository,
    ResourceDisabled,
)

ORG = "org"
USERS = ("user-0", "user-1", "user-2")
SOLOS = ("solo-0", "solo-1")
GHOSTS = {"single": "ghost-solo", "three": "ghost-user"}
AMOUNTS = {"rpm": 1, "tpm": 5}
ALSO = {"budget": {"usd": 3}}
PARENTS = {"api": ORG, "budget": ORG}
MOVES = ("plain", "adjust", "consume", "raise")
YEARLY = "0 0 1 1 *"


@dataclass(frozen=True)
class Limits:
    """Tight limits: `rpm` per `period_s` seconds on api (tpm 5x it), `usd` 3x it on budget;
    with `budget_quota`, `usd` is a quota of that many units instead, reset only on 1 January
    (a global budget: region_runs.py)."""

    rpm: int
    period_s: int
    alert_at: tuple[int, ...] = ()  # thresholds on every limit (the simulation's aggregator)
    budget_quota: int = 0

    def api(self) -> list[Limit]:
        return [self._limit("rpm", self.rpm), self._limit("tpm", 5 * self.rpm)]

    def budget(self) -> list[Limit]:
        if self.budget_quota:
            return [Limit.quota("usd", self.budget_quota, cron=YEARLY)]
        return [self._limit("usd", 3 * self.rpm)]

    def _limit(self, name: str, capacity: int) -> Limit:
        return Limit.custom(name, capacity, capacity, self.period_s, alert_at=self.alert_at)

    def by_bucket(self) -> dict[str, tuple[int, float]]:
        """Capacity and refill per second of every bucket the run touches."""
        out: dict[str, tuple[int, float]] = {}
        for entity in (*SOLOS, GHOSTS["single"], *USERS, GHOSTS["three"], ORG):
            for lim in self.api():
                out[key(entity, "api", lim.name)] = (lim.capacity, lim.capacity / self.period_s)
            if entity not in (*SOLOS, GHOSTS["single"]):
                for lim in self.budget():
                    refill = 0.0 if self.budget_quota else lim.capacity / self.period_s
                    out[key(entity, "budget", lim.name)] = (lim.capacity, refill)
        return out


def key(entity: str, resource: str, limit: str) -> str:
    return f"{entity}|{resource}|{limit}"


async def set_up(repo: Repository, limits: Limits) -> None:
    """The resource defaults and the organisation (the same limits: its users share one
    user's allowance) with its users (ghost included)."""
    await repo.set_resource_defaults("api", limits.api())
    await repo.set_resource_defaults("budget", limits.budget())
    await repo.create_entity(ORG)
    await repo.set_limits(ORG, limits.api(), "api")
    await repo.set_limits(ORG, limits.budget(), "budget")
    for user in (*USERS, GHOSTS["three"]):
        await repo.create_entity(user, parent_id=ORG, cascade=True)


class Log:
    """One process's JSON-lines history; every line reaches the kernel before the call goes on
    (a SIGKILL loses nothing written). The simulation keeps its lines in memory instead
    (support.sim.world.Lines, the same `write`)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, line: dict[str, Any]) -> None:
        self.stream.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.stream.flush()


def _spread(entity: str, resource: str, amounts: dict[str, int], call: str) -> Counter[str]:
    """Per bucket: `amounts` on the entity's item and, for cascading calls, its parent's."""
    out: Counter[str] = Counter()
    for name, amount in amounts.items():
        out[key(entity, resource, name)] += amount
        if call == "three":
            out[key(PARENTS[resource], resource, name)] += amount
    return out


async def one_op(
    limiter: RateLimiter,
    log: Log,
    op: str,
    rng: random.Random,
    now: Callable[[], float] = time.time,
) -> None:
    """Draw one call and move, log it, run it, log how it ended (at `now`, in seconds: the
    wall clock, or the simulation's)."""
    call = rng.choice(("single", "three"))
    ghost = rng.random() < 0.15
    entity = GHOSTS[call] if ghost else rng.choice(SOLOS if call == "single" else USERS)
    move = "raise" if ghost else rng.choice(MOVES)
    delta = rng.randint(-AMOUNTS["tpm"], 3) if move == "adjust" else 0
    entry = _spread(entity, "api", AMOUNTS, call)
    if call == "three":
        entry += _spread(entity, "budget", ALSO["budget"], call)
    extra = _spread(entity, "api", {"tpm": 2 if move == "consume" else 0}, call)
    forced = _spread(entity, "api", {"tpm": max(0, delta)}, call)
    credit = _spread(entity, "api", {"tpm": max(0, -delta)}, call)
    most = entry + extra + forced
    log.write({"e": "invoke", "op": op, "t": now(), "ent": entity, "call": call,
               "move": move, "max": dict(most)})  # fmt: skip
    entered = False
    outcome: dict[str, Any] = {"e": "ok", "op": op}
    watch_refunds()
    running = _RUNNING.set(outcome)
    try:
        async with limiter.acquire(
            entity, "api", dict(AMOUNTS), also=ALSO if call == "three" else None
        ) as lease:
            entered = True
            if lease.bypassed:  # the entity's api is bypassed: admitted, no balance debited
                outcome["bypassed"] = True
            if move == "adjust" and delta:
                await lease.adjust(tpm=delta)
            elif move == "consume":
                await lease.consume(tpm=2)
            elif move == "raise":
                raise Boom()
        kept = entry + extra + forced
        kept.subtract(credit)
        outcome |= {"entry": entry, "extra": extra, "forced": forced, "credit": credit,
                    "kept": +kept}  # fmt: skip
    except (Boom, RateLimitExceeded, ResourceDisabled) as exc:
        if isinstance(exc, ResourceDisabled):  # the simulation's operator disabled the entity
            outcome["disabled"] = True
        if isinstance(exc, RateLimitExceeded):  # how it was refused (the simulation checks it)
            outcome |= {"contended": exc.contended,
                        "violations": sorted(s.limit_name for s in exc.violations)}  # fmt: skip
        if not entered:  # rejected at entry: nothing was debited
            outcome |= {"e": "fail", "kept": {}}
        else:  # raised in the block (ours, or consume() refused): all of it refunded
            took = extra if isinstance(exc, Boom) else Counter()
            outcome |= {"entry": entry, "extra": took, "credit": entry + took, "kept": {}}
    except RateLimiterUnavailable as exc:  # entered: the entry debits were admitted
        outcome |= {"e": "unknown", "entered": entered, "entry": entry if entered else {},
                    "error": repr(exc)[:200]}  # fmt: skip
    except Exception as exc:  # not a documented outcome: the checker reports it
        outcome |= {"e": "unknown", "error": repr(exc)[:200], "unexpected": True}
    finally:
        # (a killed process's task is closed after the run outside its context: sim/loop.py)
        with suppress(ValueError):
            _RUNNING.reset(running)
    outcome["t"] = now()
    log.write(outcome)


#: The outcome line of the operation running in this task (`one_op`).
_RUNNING: ContextVar[dict[str, Any] | None] = ContextVar("history_operation", default=None)
#: What the lease's exit logs, in its caller's task, when the refund of a block that raised
#: could not land (acquire/acquisition.py); the block's own exception propagates.
UNREFUNDED = "refund could not land"
#: What the lease's exit logs, in its caller's task, when it returns at its deadline with its
#: write still going on off the caller's path (acquire/acquisition.py).
EXIT_LATE = "the exit of %s's lease goes on after its"


def _unrefunded(record: logging.LogRecord) -> bool:
    """A filter on the library's logger (it lets every record through): marks the running
    operation ``unrefunded`` when its lease's refund could not land, ``exit_late`` when its
    lease's exit write went on past the deadline."""
    outcome = _RUNNING.get()
    if outcome is not None:
        if str(record.msg).startswith(UNREFUNDED):
            outcome["unrefunded"] = True
        elif str(record.msg).startswith(EXIT_LATE):
            outcome["exit_late"] = True
    return True


def watch_refunds() -> None:
    """Install `_unrefunded` on the library's logger (once; the workers' stderr still gets
    every record, the simulation's capture too). It sees only records the logger's level lets
    through (WARNING and above are needed)."""
    library = logging.getLogger("zae_limiter")
    if _unrefunded not in library.filters:
        library.addFilter(_unrefunded)


class Boom(Exception):
    """Raised inside a block: everything the call took must be refunded."""
