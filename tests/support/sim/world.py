"""One simulated history: many processes of the library on one simulated table, from one seed.

`simulate(plan)` runs the recorded histories' workloads (`support.history.workload.one_op`,
`hold_worker.hold_once`) in simulated processes on the virtual-time loop (`loop`), each a real
`Repository` whose transport's HTTP path is a `network.Link` to the shared `table.SimTable`.
Every process has its own clock offset, fault draws, partitions and brown-outs; some callers are
cancelled mid-call; processes are killed (their code stops, requests already on the wire still
land) and replaced by new writers; the survivors `close()` at the end, draining what they
resolve off callers' paths. The recorded histories' checkers then judge the log lines
(`checker.judge`, `hold_checker.check_hold_lines`), together with what only a simulation sees
(an exception no task retrieved, a table left holding a concurrency unit). One seed gives one
history: `Simulated.digest` hashes every log line and the final table.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from botocore.config import Config

from support.history import hold_worker
from support.history.checker import History, Verdict, judge, problems_of
from support.history.hold_checker import HoldHistory, check_hold_lines
from support.history.hold_runs import held_after, hold_shards, take_the_cap
from support.history.workload import ORG, Limits, one_op, set_up
from support.sim.alert_check import unjustified
from support.sim.changes import Ceilings, Made, floors, operate, reparented, unbypassed
from support.sim.loop import determinism, run
from support.sim.network import Faults, Link, Window
from support.sim.stream import (
    Delivery,
    Expected,
    Stream,
    check_stream,
    holds_crossings,
    revoking_refunds,
)
from support.sim.table import SimTable
from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable, Repository
from zae_limiter.acquire.waves import MAX_ROUNDS
from zae_limiter.alerts.event import AlertEvent
from zae_limiter.dynamo.transport import Transport

LIMITS = Limits(rpm=4, period_s=20)
FAULTS = Faults()
DELIVERY = Delivery()
EPOCH_MS = 1_796_428_800_000  # 2026-12-05T00:00Z: the loop's time 0 on the true clock
TABLE = "sim"
_RATE_EVENTS = ("invoke", "ok", "fail", "unknown")
HOLD_ENTITY, HOLD_RESOURCE, HOLD_LIMIT = hold_worker.ENTITY, hold_worker.RESOURCE, hold_worker.LIMIT


@dataclass(frozen=True)
class Plan:
    """Everything a simulated history does, but for what its seed draws."""

    seed: int
    processes: int = 3
    tasks: int = 4  # rate tasks a process (support.history.workload)
    ops: int = 20  # per task (a replacement process runs them again)
    hold_tasks: int = 1  # concurrency-hold tasks a process (0: none)
    limits: Limits = LIMITS
    hold_cap: int = 2
    hold_ttl_s: int = 2
    faults: Faults = FAULTS
    kills: int = 1
    skew_ms: int = 500
    partitions: int = 1  # per process
    partition_s: float = 1.5
    brownouts: int = 0  # per process: every write throttled for `brownout_s`
    brownout_s: float = 3.0
    cancel_rate: float = 0.05  # of calls whose caller is cancelled mid-call
    pause_s: float = 0.05
    acquire_timeout: float | None = 1.0
    rejection_cache_ttl: float = 1.0
    stream: bool = True  # the aggregator on the stream alongside (usage, alerts: stream.py)
    delivery: Delivery = DELIVERY  # how the stream reaches it
    #: judge "alerts only on consumption that stays" (§5.20); None: when the library holds
    #: crossings until no refund can take them back (`stream.holds_crossings`)
    alerts_that_stay: bool | None = None
    #: configuration changes while the processes run (changes.CHANGES: each on, then undone)
    changes: tuple[str, ...] = ()
    #: a bucket item written faster than this (per second) is split (§5.10; 1,000 by default)
    split_writes_per_second: float = 1000.0
    seconds: float = 600.0  # virtual: no operation starts after it (a livelock's bound)

    def describe(self) -> str:
        fields = asdict(self)
        fields["limits"] = self.limits
        fields["faults"] = self.faults
        return ", ".join(f"{k}={v!r}" for k, v in fields.items())


@dataclass
class Lines:
    """One process's log lines in memory (the `Log.write` of the recorded workers)."""

    name: str
    lines: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False

    def write(self, line: dict[str, Any]) -> None:
        if not self.closed:
            self.lines.append(line)

    def digest(self) -> bytes:
        """A hash of the lines as the run left them (their `repr`: dicts keep the order the
        program built them in, which one seed fixes; a tenth of the cost of JSON per line)."""
        return hashlib.sha256(repr(self.lines).encode()).digest()


@dataclass
class Process:
    name: str
    slot: int
    offset_ms: int
    link: Link
    log: Lines
    repo: Repository | None = None
    killed: bool = False
    local_rejections: int = 0
    undecided: int = 0
    abandoned: int = 0
    done: asyncio.Future[None] | None = None


@dataclass
class Simulated:
    """What one simulated history did and the checkers' verdicts."""

    plan: Plan
    processes: list[Process]
    history: History
    verdicts: list[Verdict]
    holds: HoldHistory | None
    loop_errors: list[str]
    left_held: tuple[int, int]
    digest: str
    seconds: float  # virtual
    requests: int
    faults: Counter[str]
    operations: int
    local_rejections: int
    refusals: list[str] = field(default_factory=list)  # refusals that misdescribe themselves
    stream: list[str] = field(default_factory=list)  # the aggregator's usage and alerts
    stream_counts: dict[str, int] = field(default_factory=dict)
    made: list[Made] = field(default_factory=list)  # configuration changes (changes.py)
    shards: int = 1  # the most shards a bucket was split into
    #: entries still held when the history ended that their process should have given back
    unreturned: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = [f"loop: {error}" for error in self.loop_errors]
        out += self.refusals
        out += [f"stream: {problem}" for problem in self.stream]
        out += problems_of(self.history, self.verdicts)
        if self.holds is not None:
            if self.holds.over:
                out.append(f"{len(self.holds.over)} instants over {self.plan.hold_cap} held "
                           f"(first at {self.holds.over[0]:.3f} s)")  # fmt: skip
            out += self.unreturned
            if self.left_held != (0, 0):
                out.append(f"left held after the run: total {self.left_held[0]}, entries "
                           f"{self.left_held[1]}")  # fmt: skip
        return out

    @property
    def reached_table(self) -> int:
        """Operations whose decision reached the table (not answered from a cache)."""
        return self.operations - self.local_rejections


class World:
    def __init__(self, plan: Plan, rng: random.Random, table: SimTable | None = None) -> None:
        self.plan = plan
        self.rng = rng
        self.loop = asyncio.get_running_loop()
        self.table = table or SimTable(self.true_ms)
        self.table.clock = self.true_ms
        self.processes: list[Process] = []
        self.started = 0
        self.horizon = max(5.0, plan.tasks * plan.ops * plan.pause_s / 2)
        self.made: list[Made] = []  # configuration changes made
        planned = plan.processes * plan.tasks * plan.ops
        self.kill_marks = sorted(int(rng.uniform(0.15, 0.75) * planned) for _ in range(plan.kills))
        self.slots: dict[int, Process] = {}
        self.lives: list[asyncio.Future[None]] = []

    def true_ms(self) -> int:
        return EPOCH_MS + round(self.loop.time() * 1000)

    def now(self) -> float:
        return round(self.loop.time(), 6)

    async def open(self, name: str, link: Link, offset_ms: int, **settings: Any) -> Repository:
        def clock() -> int:
            return EPOCH_MS + round(self.loop.time() * 1000) + offset_ms

        transport = linked(link)
        repo = await Repository.open(
            table=TABLE,
            endpoint_url="http://simulated-dynamodb",
            clock=clock,
            client_config=Config(read_timeout=link.faults.read_timeout_s, connect_timeout=1),
            _transport=transport,
            **settings,
        )
        # (The writer's load, acquire/load.py, runs on the running loop's clock: here the loop's
        # virtual time, as the deadlines do; on the wall clock a run would depend on the machine.)
        return repo

    def windows(self, start: float) -> list[Window]:
        plan, rng = self.plan, self.rng
        horizon = self.horizon
        out = []
        for _ in range(plan.partitions):
            begin = start + rng.uniform(0, horizon)
            out.append(Window("partition", begin, begin + plan.partition_s))
        for _ in range(plan.brownouts):
            begin = start + rng.uniform(0, horizon)
            out.append(Window("brownout", begin, begin + plan.brownout_s))
        return out

    def start(self, slot: int, generation: int) -> Process:
        plan = self.plan
        name = f"p{slot}g{generation}"
        link = Link(
            self.table,
            random.Random(self.rng.randrange(2**32)),
            plan.faults,
            self.windows(self.loop.time()),
        )
        process = Process(
            name, slot, self.rng.randint(-plan.skew_ms, plan.skew_ms), link, Lines(name)
        )
        process.done = self.loop.create_future()
        self.processes.append(process)
        self.slots[slot] = process
        seed = self.rng.randrange(2**32)
        self.lives.append(asyncio.ensure_future(self.live(process, seed)))
        return process

    async def live(self, process: Process, seed: int) -> None:
        plan = self.plan
        repo = None
        while repo is None and self.loop.time() < plan.seconds and not process.killed:
            try:
                repo = await self.open(
                    process.name,
                    process.link,
                    process.offset_ms,
                    rejection_cache_ttl=plan.rejection_cache_ttl,
                    acquire_timeout=plan.acquire_timeout,
                    split_writes_per_second=plan.split_writes_per_second,
                )
            except RateLimiterUnavailable:
                await asyncio.sleep(0.5)
        if repo is None or process.killed:
            return
        process.repo = repo
        offset = process.offset_ms
        log = process.log
        ledger = repo.scope.admission.ledger
        ledger.on_written = lambda key, expiry: log.write(
            {"e": "entry", "key": key, "expiry": (expiry - offset - EPOCH_MS) / 1000}
        )
        ledger.on_landed = lambda now, received, keys: log.write(
            {"e": "wrote", "t": (now - offset - EPOCH_MS) / 1000,
             "rt": (received - offset - EPOCH_MS) / 1000, "keys": keys}
        )  # fmt: skip
        limiter = RateLimiter(repo)
        tasks = [self.task(process, limiter, i, random.Random(f"{seed}/{i}"))
                 for i in range(plan.tasks + plan.hold_tasks)]  # fmt: skip
        await asyncio.gather(*tasks)
        if process.killed:
            return
        await repo.close()
        stats = repo.get_cache_stats()
        process.abandoned = stats.abandoned_at_close
        if stats.abandoned_at_close == 0 and stats.undecided_writes == 0:
            refunded_after_deadline(log.lines)
        self.finish(process)

    def finish(self, process: Process) -> None:
        if process.repo is not None:
            stats = process.repo.get_cache_stats()
            process.local_rejections = stats.local_rejections
            process.undecided = stats.undecided_writes
        process.log.write({"e": "stats", "name": process.name, "requests": process.link.requests,
                           "faults": dict(process.link.counts), "undecided": process.undecided,
                           "skewed": 0, "local_rejections": process.local_rejections,
                           "closed": not process.killed,
                           "abandoned": process.abandoned})  # fmt: skip
        process.log.closed = True
        assert process.done is not None
        if not process.done.done():
            process.done.set_result(None)

    async def task(self, process: Process, limiter: RateLimiter, index: int,
                   rng: random.Random) -> None:  # fmt: skip
        plan = self.plan
        holder = index >= plan.tasks
        for number in range(plan.ops):
            if process.killed or self.loop.time() >= plan.seconds:
                return
            op = f"{process.name}-{index}-{number}"
            if holder:
                work = hold_worker.hold_once(
                    limiter, process.log, op, rng, plan.hold_ttl_s, self.now
                )
            else:
                self.started += 1
                self.kill_due()
                if process.killed:
                    return
                work = one_op(limiter, process.log, op, rng, self.now)  # type: ignore[arg-type]
            call = asyncio.ensure_future(work)
            if rng.random() < plan.cancel_rate:
                self.loop.call_later(rng.uniform(0, 0.05), call.cancel)
            try:
                await call
            except asyncio.CancelledError:
                if not holder:
                    process.log.write({"e": "unknown", "op": op, "t": self.now(),
                                       "error": "the caller was cancelled"})  # fmt: skip
            await asyncio.sleep(rng.uniform(0, plan.pause_s))

    def kill_due(self) -> None:
        while self.kill_marks and self.started >= self.kill_marks[0]:
            self.kill_marks.pop(0)
            live = sorted(s for s, p in self.slots.items() if not p.killed and not p.done.done())  # type: ignore[union-attr]
            if not live:
                return
            slot = self.rng.choice(live)
            victim = self.slots[slot]
            victim.killed = True
            victim.link.kill()
            self.finish(victim)
            generation = sum(p.slot == slot for p in self.processes)
            self.start(slot, generation)

    async def main(self) -> Simulated:
        plan = self.plan
        admin_link = Link(self.table, random.Random(0), Faults(rate=0.0, kinds=()))
        await _set_up_table(self)
        admin = await self.open("admin", admin_link, 0, rejection_cache_ttl=0)
        await set_up(admin, plan.limits)
        limiter = RateLimiter(admin)
        if plan.hold_tasks:
            await limiter.set_resource_defaults(
                HOLD_RESOURCE,
                [Limit.concurrent(HOLD_LIMIT, plan.hold_cap, lease_ttl=plan.hold_ttl_s)],
            )
        stream = None
        if plan.stream:
            stream = Stream(self.table, TABLE, plan.delivery, plan.seed, linked, self.true_ms)
        for slot in range(plan.processes):
            self.start(slot, 0)
        operator = None
        if plan.changes:
            operator = asyncio.ensure_future(operate(
                admin, plan.limits, plan.changes, random.Random(f"changes/{plan.seed}"),
                self.now, self.horizon, self.made,
            ))  # fmt: skip
        while True:
            pending = [p.done for p in self.processes if p.done is not None and not p.done.done()]
            if not pending:
                break
            await asyncio.wait(pending)
        if operator is not None:
            await operator  # (its changes end within seconds of the history's horizon)
        if stream is not None:
            await stream.finish()
        return await self.verdicts(admin, limiter, stream)

    async def verdicts(
        self, admin: Repository, limiter: RateLimiter, stream: Stream | None
    ) -> Simulated:
        plan = self.plan
        lines = {p.name: p.log.lines for p in self.processes}
        history = History()
        for name in sorted(lines):
            for line in lines[name]:
                if line["e"] in ("invoke", "ok", "fail", "unknown", "stats"):
                    history.add(line)
        entities = {b.split("|")[0] for b in plan.limits.by_bucket()}
        stored: Counter[str] = Counter()
        for entity in sorted(entities):
            for state in await admin.get_buckets(entity):
                stored[f"{state.entity_id}|{state.resource}|{state.limit_name}"] += (
                    state.total_consumed
                )
        spread = [p.offset_ms for p in self.processes]
        history = reparented(history, self.made)
        verdicts = judge(unbypassed(history), stored, Ceilings(plan.limits, self.made),  # type: ignore[arg-type]
                         max(spread) - min(spread))  # fmt: skip
        holds = None
        left = (0, 0)
        unreturned: list[str] = []
        if plan.hold_tasks:
            hold_lines = {name: [line for line in named if line["e"] not in _RATE_EVENTS]
                          for name, named in lines.items()}  # fmt: skip
            holds = check_hold_lines(hold_lines, plan.hold_cap, plan.hold_ttl_s)
            unreturned = not_given_back(self.processes, await hold_shards(admin))
            left = await self.left_held(admin, limiter)
        stream_problems: list[str] = []
        stream_counts: dict[str, int] = {}
        if stream is not None:
            stays = plan.alerts_that_stay
            if stays is None:
                stays = holds_crossings()
            judge_stays = None
            if stays:
                lowest = floors(plan.limits, self.made)
                skew = max(abs(p.offset_ms) for p in self.processes)

                def judge_stays(expected: Expected, alerts: list[AlertEvent]) -> list[str]:
                    refunds = revoking_refunds(self.table, TABLE)
                    return unjustified(expected, alerts, history, lowest, EPOCH_MS, skew, refunds)

            stream_problems, stream_counts = await check_stream(
                self.table, TABLE, admin, stored, judge_stays
            )
            stream_problems = stream.problems + stream_problems
            stream_counts |= stream.counts()
        await admin.close()
        refusals = [problem for p in self.processes for problem in misdescribed(p, lines[p.name])]
        digest = hashlib.sha256()
        for process in sorted(self.processes, key=lambda p: p.name):
            digest.update(process.log.digest())
        digest.update(self.table.digest().encode())
        operations = len(history.ops)
        for process in self.processes:  # hold operations: each ends held, refused or not
            operations += sum(line["e"] in ("held", "refused", "unavailable")
                              for line in process.log.lines)  # fmt: skip
        return Simulated(
            plan=plan,
            processes=self.processes,
            history=history,
            verdicts=verdicts,
            holds=holds,
            loop_errors=[],
            left_held=left,
            unreturned=unreturned,
            digest=digest.hexdigest(),
            seconds=self.loop.time(),
            requests=sum(p.link.requests for p in self.processes),
            faults=sum((p.link.counts for p in self.processes), Counter()),
            operations=operations,
            local_rejections=sum(p.local_rejections for p in self.processes),
            refusals=refusals,
            stream=stream_problems,
            stream_counts=stream_counts,
            made=self.made,
            shards=max(
                (int(i.get("sc", {}).get("N", 1)) for i in self.table.table(TABLE).items()),
                default=1,
            ),
        )

    async def left_held(self, admin: Repository, limiter: RateLimiter) -> tuple[int, int]:
        """After the holds left behind lapse (a killed process's, a lease its cancelled caller
        never exited), a new writer takes the whole cap one unit a call on every shard (it
        frees them a lease_ttl after it first sees them), gives it back; what stays held on
        all shards."""
        await take_the_cap(limiter, self.plan.hold_cap)
        return await held_after(admin)


def not_given_back(processes: list[Process], shards: list[dict[str, Any]]) -> list[str]:
    """The entries still held when the history ended (`shards`: the limit on each shard) of a
    process that closed with every lease it took exited with its hold, nothing abandoned and no
    write undecided: a give-back that never landed while `close()` reported nothing (a slot
    leaked until another writer frees the entry). A killed process's entries, and those of a
    process with a lease never exited (its caller was cancelled in the block) or lost, lapse."""
    owners = {line["key"].rsplit(".", 1)[0]: process for process in processes
              for line in process.log.lines if line["e"] == "entry"}  # fmt: skip
    out = []
    for shard, limit in enumerate(shards):
        for key in sorted(limit["h"]):
            process = owners.get(key.rsplit(".", 1)[0])
            if process is None or process.killed or process.abandoned or process.undecided:
                continue  # (a killed process's write may land after its log closed)
            lines = process.log.lines
            given = {line["op"] for line in lines if line["e"] == "leave" and not line["lost"]}
            if all(line["op"] in given for line in lines if line["e"] == "held"):
                out.append(f"left held after the run: entry {key} (shard {shard}) of "
                           f"{process.name}, which closed with every lease given back and "
                           "nothing abandoned")  # fmt: skip
    return out


def refunded_after_deadline(lines: list[dict[str, Any]]) -> None:
    """Admissions that passed their deadline undecided kept nothing once their process closed
    with nothing abandoned and no write undecided (reference §12 item 12: whatever landed for
    them was refunded while `close()` drained): judged as refused from then on. Their refund
    still counts as a credit that may have landed inside any span (the over-admission check)."""
    most = {line["op"]: line["max"] for line in lines if line["e"] == "invoke"}
    for line in lines:
        if (line["e"] == "unknown" and not line.get("entered") and line["op"] in most
                and "deadline" in str(line.get("error", ""))):  # fmt: skip
            line.update({"e": "fail", "kept": {}, "credit": most[line["op"]], "resolved": True})


def misdescribed(process: Process, lines: list[dict[str, Any]]) -> list[str]:
    """Refusals that say the wrong thing (docs/errors.md): a contended refusal names no
    exceeded limit, and only comes after a call's rounds ran out, which takes `MAX_ROUNDS`
    condition failures of this process's writes on one of the call's items while it ran."""
    out = []
    invoked = {line["op"]: line for line in lines if line["e"] == "invoke"}
    for line in lines:
        if line["e"] != "fail" or not line.get("contended"):
            continue
        op = invoked[line["op"]]
        if line["violations"]:
            out.append(f"{line['op']}: contended, yet names {line['violations']} exceeded")
        entities = [op["ent"], ORG] if op["call"] == "three" else [op["ent"]]
        resources = ["api", "budget"] if op["call"] == "three" else ["api"]
        marks = [f"#B#{e}#{r}#" for e in entities for r in resources]
        most = max(
            (sum(op["t"] <= t <= line["t"] for t in times)
             for pk, times in process.link.failed.items() if any(m in pk for m in marks)),
            default=0,
        )  # fmt: skip
        if most < MAX_ROUNDS:
            out.append(f"{line['op']}: contended after {most} condition failures on its items "
                       f"(rounds run out after {MAX_ROUNDS})")  # fmt: skip
    return out


def linked(link: Link) -> Transport:
    """The library's transport with `link` as its HTTP path (no botocore client behind it)."""
    stub = SimpleNamespace(meta=SimpleNamespace(region_name="us-east-1"))
    return Transport(stub, _NoExit(), http=link)  # type: ignore[arg-type]


class _NoExit:
    async def __aexit__(self, *exc: object) -> None:
        return None


async def _set_up_table(world: World) -> None:
    """The table, its version record and the default namespace, as `Repository.create_table`
    makes them (dated by the simulation's clock, not the wall clock)."""
    from zae_limiter import connection
    from zae_limiter.dynamo.store import Store

    link = Link(world.table, random.Random(0), Faults(rate=0.0, kinds=()))
    transport = linked(link)
    wall = connection.system_clock
    connection.system_clock = world.true_ms
    try:
        await connection.set_up_table(
            transport, Store(transport, TABLE), TABLE, ("default",), True, None
        )
    finally:
        connection.system_clock = wall


def simulate(plan: Plan, table: SimTable | None = None) -> Simulated:
    """Run the history `plan` describes (see the module docstring), on `table` if given (a
    recording one: tests/sim/test_sim_differential.py)."""
    logger = logging.getLogger("zae_limiter")
    level, propagate = logger.level, logger.propagate
    # Thousands of expected warnings (faults are the point) go nowhere; the level still lets
    # them reach the workload's filter, which marks operations by them (workload.watch_refunds).
    quiet = logging.NullHandler()
    logger.setLevel(logging.WARNING)
    logger.addHandler(quiet)
    logger.propagate = False
    try:
        with determinism(plan.seed) as rng:

            async def main() -> Simulated:
                return await World(plan, rng, table).main()

            result, errors = run(main())
    finally:
        logger.setLevel(level)
        logger.removeHandler(quiet)
        logger.propagate = propagate
    return replace(result, loop_errors=errors)
