"""The fleet phase: what a fleet of short-lived writers leaves on bucket items (issue 43, §6).

Every Lambda container, pod or CLI run is a writer (one opened repository). Per level of writers
(0, 100, 1,000; each a real repository, opened, used and closed, as a container would) on a
fresh table, each writer debits a single item (`solo`) and a cascade (`user` and its `org`) once
per kind of limit (rate, quota, concurrency: a hold taken and given back), either spread over
five minutes of the injectable clock or all at the same instant; then a fresh writer makes one
cold call per item (its first) and one warm call, measured on the wire. The table's largest
item is measured by a scan (sizes by DynamoDB's rules). Then `loop`: 200 writers open at once,
each debiting one item in a loop; WCU per call and per write.

0.17.0 takes no clock (its writers are at the real clock, one after another or at once) and has
no concurrency limit (that kind is left out for it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from benchmarks.impls import Impl
from benchmarks.scenarios import new_table_name
from zae_limiter import Limit, RateLimiter

LEVELS = (0, 100, 1_000)
MODES = ("spread", "at_once")
SPREAD_MS = 5 * 60_000
#: Writers of the at-once mode working at one time (each opens, writes, closes).
AT_ONCE_BATCH = 10
LOOP_WRITERS = 200
LOOP_ROUNDS = 5
#: The loop's clock step per round (ours): every writer wrote within the last second.
LOOP_STEP_MS = 100
BIG = 10**12
KINDS = ("rate", "quota", "concurrent")
ITEMS = ("single", "cascade")


def kinds_of(impl: Impl) -> tuple[str, ...]:
    """0.17.0 has no concurrency limit."""
    return KINDS if hasattr(Limit, "concurrent") else KINDS[:2]


def _limits(kind: str) -> list[Limit]:
    if kind == "rate":
        return [Limit.per_minute("rpm", BIG)]
    if kind == "quota":
        return [Limit.quota("weekly", BIG, cron="0 0 * * 1")]
    return [Limit.concurrent("par", 10**6)]  # type: ignore[attr-defined, unused-ignore]


def _amounts(kind: str) -> dict[str, int]:
    return {"rate": {"rpm": 1}, "quota": {"weekly": 1}, "concurrent": {"par": 1}}[kind]


def _fake_clock(start_ms: int) -> Any:
    from support.clock import FakeClock  # tests/ is on the worker's path

    return FakeClock(start_ms)


async def _open(impl: Impl, table: str, clock: Any) -> Any:
    if impl.name == "ours":  # no deadline: a loaded machine must not turn a call into an error
        return await impl.open(table, clock=clock, acquire_timeout=None)  # type: ignore[call-arg]
    return await impl.open(table)


async def _setup(impl: Impl, table: str, clock: Any, kinds: tuple[str, ...]) -> None:
    repo = await _open(impl, table, clock)
    try:
        limiter = RateLimiter(repo)
        for kind in kinds:
            await limiter.set_resource_defaults(kind, _limits(kind))
            await repo.set_resource_cascade(kind, True)
        await limiter.create_entity(entity_id="org")
        await limiter.create_entity(entity_id="user", parent_id="org")
        await limiter.create_entity(entity_id="solo")
        for kind in kinds:
            await limiter.set_limits("org", _limits(kind), resource=kind)
    finally:
        await repo.close()


async def _debit_all(limiter: RateLimiter, kinds: tuple[str, ...]) -> None:
    """One writer's work: each kind on the single item and on the cascade."""
    for kind in kinds:
        for entity in ("solo", "user"):
            async with limiter.acquire(entity, kind, _amounts(kind)):
                pass


async def _writer(impl: Impl, table: str, clock: Any, kinds: tuple[str, ...]) -> str | None:
    """One writer's work; what went wrong, if anything (reported, not raised: a call the
    engine did not answer must not end the level)."""
    try:
        repo = await _open(impl, table, clock)
        try:
            await _debit_all(RateLimiter(repo), kinds)
        finally:
            await repo.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


async def _run_writers(
    impl: Impl, table: str, clock: Any, writers: int, mode: str, kinds: tuple[str, ...]
) -> list[str]:
    """The writers' errors (none, normally)."""
    if mode == "spread":
        errors = []
        for _ in range(writers):
            errors.append(await _writer(impl, table, clock, kinds))
            if clock is not None:
                clock.advance(SPREAD_MS // max(writers, 1))
        return [e for e in errors if e]
    gate = asyncio.Semaphore(AT_ONCE_BATCH)

    async def one() -> str | None:
        async with gate:
            return await _writer(impl, table, clock, kinds)

    return [e for e in await asyncio.gather(*(one() for _ in range(writers))) if e]


async def largest_item(impl: Impl, repo: Any, table: str) -> int:
    """The largest item of the table (a scan: the table holds one scenario's items)."""
    from support.item_size import item_size  # (run by the worker, which has tests/ on its path)

    client = await impl.client(repo)
    largest, start = 0, None
    while True:
        args: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        if start:
            args["ExclusiveStartKey"] = start
        page = await client.scan(**args)
        largest = max([largest, *(item_size(i) for i in page.get("Items", []))])
        start = page.get("LastEvaluatedKey")
        if not start:
            return largest


async def _measured(recorder: Any, call: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    with recorder.block() as block:
        try:
            await call()
            outcome = "admitted"
        except Exception as exc:  # reported, not raised
            outcome = f"error: {type(exc).__name__}: {exc}"[:200]
    return {
        "outcome": outcome,
        "round_trips": block.round_trips,
        "rcu": block.rcu,
        "wcu": block.wcu,
        "writes": sum(1 for r in block.requests if r.operation == "UpdateItem"),
        "failed": sum(1 for r in block.requests if r.failed),
    }


async def fleet_level(
    impl: Impl, recorder: Any, *, writers: int, mode: str, start_ms: int | None = None
) -> dict[str, Any]:
    """One level of one mode on a fresh table (see the module docstring)."""
    kinds = kinds_of(impl)
    table = new_table_name(impl, f"fleet{writers}{mode[0]}")
    await impl.create_table(table)
    clock = _fake_clock(start_ms or int(time.time() * 1000)) if impl.name == "ours" else None
    await _setup(impl, table, clock, kinds)
    t0 = time.perf_counter()
    errors = await _run_writers(impl, table, clock, writers, mode, kinds)
    writers_s = time.perf_counter() - t0
    fresh = await _open(impl, table, clock)
    try:
        limiter = RateLimiter(fresh)
        largest_before = await largest_item(impl, fresh, table)
        rows: dict[str, Any] = {}
        for kind in kinds:
            for item, entity in (("single", "solo"), ("cascade", "user")):

                async def call(entity: str = entity, kind: str = kind) -> None:
                    async with limiter.acquire(entity, kind, _amounts(kind)):
                        pass

                cold = await _measured(recorder, call)
                warm = await _measured(recorder, call)
                rows[f"{kind}/{item}"] = {"cold": cold, "warm": warm}
        largest = await largest_item(impl, fresh, table)
    finally:
        await fresh.close()
    return {
        "writers": writers,
        "mode": mode,
        "largest_item_bytes": max(largest_before, largest),
        "calls": rows,
        "writers_s": round(writers_s, 1),
        "writer_errors": len(errors),
        "first_errors": errors[:3],
    }


async def fleet_loop(
    impl: Impl,
    recorder: Any,
    *,
    writers: int = LOOP_WRITERS,
    rounds: int = LOOP_ROUNDS,
    start_ms: int | None = None,
) -> dict[str, Any]:
    """`writers` repositories open at once, each debiting one item once per round, all
    writers of a round at once; WCU per call and per write over the measured rounds."""
    table = new_table_name(impl, "fleetloop")
    await impl.create_table(table)
    clock = _fake_clock(start_ms or int(time.time() * 1000)) if impl.name == "ours" else None
    await _setup(impl, table, clock, ("rate",))
    repos = []
    try:
        for _ in range(writers):
            repos.append(await _open(impl, table, clock))
        limiters = [RateLimiter(r) for r in repos]

        async def one(limiter: RateLimiter) -> None:
            async with limiter.acquire("solo", "rate", {"rpm": 1}):
                pass

        await asyncio.gather(*(one(x) for x in limiters))  # every writer warm, its entry there
        errors = 0
        with recorder.block() as block:
            for _ in range(rounds):
                if clock is not None:
                    clock.advance(LOOP_STEP_MS)
                results = await asyncio.gather(*(one(x) for x in limiters), return_exceptions=True)
                errors += sum(1 for r in results if isinstance(r, BaseException))
        calls = writers * rounds
        updates = [r for r in block.requests if r.operation == "UpdateItem"]
        landed = [r for r in updates if not r.failed]
        failures = Counter(r.error_code or r.transport_error or "?" for r in updates if r.failed)
        largest = await largest_item(impl, repos[0], table)
    finally:
        for repo in repos:
            with contextlib.suppress(Exception):
                await repo.close()
    return {
        "writers": writers,
        "rounds": rounds,
        "calls": calls,
        "errors": errors,
        "wcu": block.wcu,
        "wcu_per_call": block.wcu / calls,
        "writes": len(updates),
        "failed_writes": sum(1 for r in updates if r.failed),
        "wcu_per_write": block.wcu / max(len(updates), 1),
        "wcu_per_landed_write": sum(r.wcu for r in landed) / max(len(landed), 1),
        "failures": dict(failures),
        "largest_item_bytes": largest,
    }


async def fleet(
    impl: Impl,
    recorder: Any,
    *,
    levels: tuple[int, ...] = LEVELS,
    modes: tuple[str, ...] = MODES,
    loop_writers: int = LOOP_WRITERS,
    loop_rounds: int = LOOP_ROUNDS,
) -> dict[str, Any]:
    out: dict[str, Any] = {"levels": [], "kinds": list(kinds_of(impl))}
    for writers in levels:
        for mode in modes if writers else modes[:1]:
            out["levels"].append(await fleet_level(impl, recorder, writers=writers, mode=mode))
    out["loop"] = await fleet_loop(impl, recorder, writers=loop_writers, rounds=loop_rounds)
    return out


# --- the bench phase and its report ---------------------------------------------------------

QUICK_LEVELS = (0, 20)


def bench_phase(workers: dict[str, Any], *, quick: bool) -> dict[str, Any]:
    """The "fleet" phase of `benchmarks.run`: each implementation's worker in turn (ours
    first: 0.17.0's 1,000 writers take longest)."""
    args: dict[str, Any] = {
        "levels": list(QUICK_LEVELS if quick else LEVELS),
        "loop_writers": 20 if quick else LOOP_WRITERS,
        "loop_rounds": 2 if quick else LOOP_ROUNDS,
    }
    out: dict[str, Any] = {}
    for impl in ("ours", "theirs"):
        try:
            out[impl] = workers[impl].call("fleet", **args)
        except Exception as exc:  # reported: one side failing must not hide the other
            out[impl] = {"error": str(exc)[:500]}
    return out


def _warm(level: dict[str, Any], kind: str, item: str) -> str:
    row = level["calls"].get(f"{kind}/{item}")
    if row is None:
        return "-"
    warm = row["warm"]
    if warm["outcome"] != "admitted":
        return "error"
    return f"{warm['wcu']:g}"


def section(result: dict[str, Any]) -> str:
    """The report's tables: per level, the largest item and a fresh writer's warm WCU; the
    loop's WCU per call and per write."""
    lines = [
        "Warm WCU of a fresh writer's call (its second on the item; a concurrency limit: the "
        "hold taken and given back, two writes), per kind: single item and cascade (user and "
        "organisation). Largest item: the table's largest, in bytes.",
        "",
        "| Writers | arrival | who | largest item (B) | rate: single | cascade | quota: single "
        "| cascade | concurrency: single | cascade |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    sides = [(who, r) for who, r in result.items() if "levels" in r]
    for who, r in result.items():
        if "error" in r:
            lines.append(f"| | | {who} | error: {r['error'][:120]} | | | | | | |")
    by_level: dict[tuple[int, str], dict[str, Any]] = {}
    for who, r in sides:
        for level in r["levels"]:
            by_level.setdefault((level["writers"], level["mode"]), {})[who] = level
    for (writers, mode), levels in sorted(
        by_level.items(), key=lambda x: (x[0][0], x[0][1] != "spread")
    ):
        for who, level in levels.items():
            cells = [_warm(level, kind, item) for kind in KINDS for item in ITEMS]
            failed = level.get("writer_errors", 0)
            note = f" ({failed} writers failed)" if failed else ""
            lines.append(
                f"| {writers:,} | {mode.replace('_', ' ')}{note} | {who} | "
                f"{level['largest_item_bytes']:,} | " + " | ".join(cells) + " |"
            )
    lines += [
        "",
        "Writers open at once, each debiting one item once a round, all at once:",
        "",
        "| who | writers x rounds | WCU per call | WCU per landed write | failed writes | "
        "errors | largest item (B) |",
        "|---|---|---|---|---|---|---|",
    ]
    for who, r in sides:
        loop = r["loop"]
        failures = ", ".join(f"{k} {v}" for k, v in loop.get("failures", {}).items())
        lines.append(
            f"| {who} | {loop['writers']} x {loop['rounds']} | {loop['wcu_per_call']:.2f} | "
            f"{loop.get('wcu_per_landed_write', loop['wcu_per_write']):.2f} | "
            f"{loop['failed_writes']}{f' ({failures})' if failures else ''} | {loop['errors']} | "
            f"{loop['largest_item_bytes']:,} |"
        )
    return "\n".join(lines)
