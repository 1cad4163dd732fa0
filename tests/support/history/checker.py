"""Check a recorded history against the final balances (docs/contributing.md, `make soak`).

Per bucket (``entity|resource|limit``):

- **ledger**: the stored consumption lies in [what ok operations kept, less the forced
  adjustments of *exit-unresolved* ones; that plus the most every unknown one could have kept,
  plus the credit of every *unrefunded* or exit-unresolved one] (an unknown outcome may count
  either way, nothing else may). Unrefunded: a block raised and the library reported its refund
  undecided (it logged *refund could not land*, workload.py), which docs/on-unavailable.md
  allows ("When a write stays undecided": a write sent without evidence whose answer was lost,
  an entry other writers removed), the debit staying if it did not land. Exit-unresolved: the
  lease's exit returned at its deadline with its write going on off the caller's path
  (``exit_late``, reference §5.1 item 6) and its process did not close with every write
  resolved (killed, or something abandoned or undecided at close): that write (adjustments,
  a refund) may never have been sent, as docs/on-unavailable.md says of a SIGKILLed pod;
- **over-admission**: over every span of the lengths in `SPANS_S` starting at an admission,
  what operations certainly inside it admitted (entry debits and ``consume()``) is at most
  capacity + refill earned over the span widened by twice the clock-skew spread + everything
  credited back by operations overlapping it (refunds, adjustments down; an unknown operation's
  whole debit). Forced adjustments up are not admissions;
- **leftover** (refund-only entities, whose every call raises in its block): consumption 0, or
  no more than unknown operations could have left; `killed_upper` is the part of that bound
  from operations of processes that were killed (a debit that landed for a process killed before
  its refund is known to no living writer: only its undecided writes and deadlines could be
  resolved by another read, and those are);
- **all-or-none** (entities of the three-bucket call): the calls that landed on ``api`` (its
  ``rpm``, 1 a call) and on ``budget`` (``usd``, 3 a call) differ by no more than the unknown,
  unrefunded and exit-unresolved calls on that entity (an undecided refund may land on some
  items only).
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import accumulate
from pathlib import Path
from typing import Any

from support.history.runner import Ran
from support.history.workload import GHOSTS, ORG, USERS, Limits
from zae_limiter import Repository

SPANS_S = (0.5, 1, 2, 5, 10, 30, 60, 120, 300)


@dataclass
class Op:
    invoke: dict[str, Any]
    done: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        return "unknown" if self.done is None else str(self.done["e"])

    @property
    def unrefunded(self) -> bool:
        """Its block raised and its refund stayed undecided (workload.py): its credit may not
        have landed."""
        return self.done is not None and bool(self.done.get("unrefunded"))

    @property
    def process(self) -> str:
        """The name of the process that ran it (operations are named ``process-task-number``)."""
        return str(self.invoke["op"]).rsplit("-", 2)[0]


@dataclass
class History:
    ops: dict[str, Op] = field(default_factory=dict)
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)  # last line per worker

    @property
    def outcomes(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for op in self.ops.values():
            name = op.outcome
            if op.done is None:
                name = "unknown (process killed)"
            elif op.done.get("unexpected"):
                name = "unknown (unexpected error)"
            counts[name] += 1
        return counts

    @property
    def faults(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for line in self.stats.values():
            out.update(line["faults"])
        return out

    def exit_unresolved(self, op: Op) -> bool:
        """`op`'s lease exit went on off the caller's path (workload.py: ``exit_late``) and its
        process did not close with every write resolved: what that exit wrote may not have
        landed (the module docstring)."""
        if op.done is None or not op.done.get("exit_late"):
            return False
        line = self.stats.get(op.process, {})
        clean = line.get("closed") and not line.get("abandoned") and not line.get("undecided")
        return not clean

    def total(self, field_name: str) -> int:
        return sum(int(line.get(field_name, 0)) for line in self.stats.values())

    def add(self, line: dict[str, Any]) -> None:
        """One log line (an operation's invoke or outcome, or a worker's stats)."""
        if line["e"] == "invoke":
            self.ops[line["op"]] = Op(line)
        elif line["e"] == "stats":
            self.stats[line["name"]] = line
        elif line["op"] in self.ops:
            self.ops[line["op"]].done = line


def read_history(logs: list[Path]) -> History:
    history = History()
    for path in logs:
        if not path.exists():
            continue
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                continue  # the last line of a killed process may be cut short
            history.add(line)
    return history


@dataclass
class Verdict:
    bucket: str
    capacity: int
    consumed: int
    lower: int
    upper: int
    admitted: int
    ok_ops: int
    unknown_ops: int
    over: float  # worst excess over the allowance, 0 when none
    ledger_ok: bool
    leftover: int | None = None  # refund-only buckets: their consumption
    killed_upper: int = 0  # the most that operations of killed processes could have left
    leftover_ok: bool = True
    all_or_none_gap: Fraction | None = None  # api calls minus budget calls (three-bucket)
    all_or_none_ok: bool = True

    @property
    def turns(self) -> float:
        """How many times over the capacity was admitted."""
        return self.admitted / self.capacity if self.capacity else 0.0


@dataclass
class Checked:
    history: History
    verdicts: list[Verdict]
    errors: list[str] = field(default_factory=list)  # workers that ended badly on their own

    @property
    def problems(self) -> list[str]:
        return [f"worker failed: {error}" for error in self.errors] + problems_of(
            self.history, self.verdicts
        )


def problems_of(history: History, verdicts: list[Verdict]) -> list[str]:
    """Every violation the verdicts and the operations' outcomes show, one line each."""
    out = []
    for v in verdicts:
        if v.over > 0:
            out.append(f"{v.bucket}: admitted {v.over:.2f} over its limit")
        if not v.ledger_ok:
            out.append(f"{v.bucket}: consumed {v.consumed} outside [{v.lower}, {v.upper}]")
        if not v.leftover_ok:
            out.append(f"{v.bucket}: refund-only entity left {v.leftover}")
        if not v.all_or_none_ok:
            out.append(f"{v.bucket}: all-or-none gap {v.all_or_none_gap}")
    unexpected = history.outcomes["unknown (unexpected error)"]
    if unexpected:
        errors = sorted({str(op.done.get("error")) for op in history.ops.values()
                         if op.done is not None and op.done.get("unexpected")})  # fmt: skip
        out.append(f"{unexpected} operations raised an undocumented error: {errors[:3]}")
    return out


async def consumed_by_bucket(repo: Repository, entities: set[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for entity in sorted(entities):
        for state in await repo.get_buckets(entity):
            out[f"{state.entity_id}|{state.resource}|{state.limit_name}"] += state.total_consumed
    return out


def _amount(line: dict[str, Any] | None, part: str, bucket: str) -> int:
    return int((line or {}).get(part, {}).get(bucket, 0))


class _Sums:
    """Prefix sums of amounts by time: how much lies at or before (or strictly before) `t`."""

    def __init__(self, pairs: list[tuple[float, int]]) -> None:
        pairs.sort()
        self.times = [t for t, _ in pairs]
        self.sums = [0, *accumulate(a for _, a in pairs)]

    def upto(self, t: float) -> int:
        return self.sums[bisect_right(self.times, t)]

    def before(self, t: float) -> int:
        return self.sums[bisect_left(self.times, t)]


def worst_excess(ops: list[Op], bucket: str, capacity: int, rate: float, slack_s: float) -> float:
    """The largest (admitted - allowance) over the spans of `SPANS_S` (see the docstring).

    What was admitted inside [start, stop] is taken no larger than what operations that ended by
    `stop` admitted minus what operations that began before `start` admitted (each operation's
    debit happened between its two log lines): never more than certainly happened inside."""
    end = max((op.done["t"] for op in ops if op.done), default=0.0)
    began, ended, credit_began, credit_ended = [], [], [], []
    for op in ops:
        line, done = op.invoke, op.done
        entered = done is not None and (done["e"] == "ok" or bool(done.get("entered")))
        admitted = _amount(done, "entry", bucket) if entered else 0
        admitted += _amount(done, "extra", bucket) if done and done["e"] == "ok" else 0
        if done is None or done["e"] == "unknown":
            credit = int(line["max"].get(bucket, 0))  # its refund may have landed
        else:
            credit = _amount(done, "credit", bucket)
        t1 = done["t"] if done else end
        if admitted:
            began.append((line["t"], admitted))
            ended.append((t1, admitted))
        if credit:
            credit_began.append((line["t"], credit))
            credit_ended.append((t1, credit))
    if not began:
        return 0.0
    starts = sorted(t for t, _ in began)
    adm_began, adm_ended = _Sums(began), _Sums(ended)
    cred_began, cred_ended = _Sums(credit_began), _Sums(credit_ended)
    worst = float("-inf")
    for start in starts:
        for length in SPANS_S:
            stop = start + length
            inside = adm_ended.upto(stop) - adm_began.before(start)
            back = cred_began.upto(stop) - cred_ended.before(start)  # overlapping the span
            worst = max(worst, inside - capacity - rate * (length + slack_s) - back)
    return max(0.0, worst)


def judge(
    history: History, stored: Counter[str], limits: Limits, skew_spread_ms: int
) -> list[Verdict]:
    """Every bucket's verdict: `stored` is each bucket's consumption as read after the run."""
    buckets = limits.by_bucket()
    slack_s = 2 * skew_spread_ms / 1000
    verdicts = []
    for bucket, (capacity, rate) in buckets.items():
        touching = [op for op in history.ops.values() if bucket in op.invoke["max"]]
        ok = [op for op in touching if op.outcome in ("ok", "fail")]
        unknown = [op for op in touching if op.outcome == "unknown"]
        doubtful = [op for op in ok if op.unrefunded or history.exit_unresolved(op)]
        kept = sum(_amount(op.done, "kept", bucket) for op in ok)
        lower = kept - sum(_amount(op.done, "forced", bucket) for op in doubtful)
        upper = kept + sum(int(op.invoke["max"][bucket]) for op in unknown)
        upper += sum(_amount(op.done, "credit", bucket) for op in doubtful)
        consumed = stored[bucket]
        admitted = sum(
            _amount(op.done, "entry", bucket) + _amount(op.done, "extra", bucket) for op in ok
        )
        verdict = Verdict(
            bucket,
            capacity,
            consumed,
            lower,
            upper,
            admitted,
            len(ok),
            len(unknown),
            worst_excess(touching, bucket, capacity, rate, slack_s),
            lower <= consumed <= upper,
        )
        entity, resource, name = bucket.split("|")
        if entity in GHOSTS.values():
            verdict.leftover = consumed
            verdict.leftover_ok = consumed == 0 or consumed <= upper
            verdict.killed_upper = sum(
                int(op.invoke["max"][bucket]) for op in unknown if op.done is None
            )
        if entity in (*USERS, GHOSTS["three"], ORG) and (resource, name) == ("api", "rpm"):
            calls_api = Fraction(consumed)
            calls_budget = Fraction(stored[f"{entity}|budget|usd"], 3)
            unknown_three = sum(op.invoke["call"] == "three" for op in unknown + doubtful)
            verdict.all_or_none_gap = calls_api - calls_budget
            verdict.all_or_none_ok = abs(calls_api - calls_budget) <= unknown_three
        verdicts.append(verdict)
    return verdicts


async def check(ran: Ran, repo: Repository, limits: Limits) -> Checked:
    history = read_history(ran.logs)
    entities = {b.split("|")[0] for b in limits.by_bucket()}
    stored = await consumed_by_bucket(repo, entities)
    return Checked(history, judge(history, stored, limits, ran.skew_spread_ms))
