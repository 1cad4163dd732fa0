"""Bugs the project has had, put back one at a time into a copy of the library, to measure
what the simulation finds (`make sim MUTANT=name`, docs/contributing.md).

Each mutant is a list of exact text replacements in `runtime/zae_limiter`; `applied(name)`
copies the package to a temporary directory, makes them (each must match exactly once, so a
mutant that no longer applies says so instead of testing nothing) and yields the directory to
put first on `PYTHONPATH`. `none` is the library as it is.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "runtime" / "zae_limiter"


@dataclass(frozen=True)
class Mutant:
    what: str
    history: str  # where the project met it
    edits: tuple[tuple[str, str, str], ...]  # (path under zae_limiter/, old, new)
    #: a module under zae_limiter/ whose absence means the library has the bug as it is (a rule
    #: not implemented yet): then `applied` yields the library unchanged
    missing_rule: str = ""
    #: Plan fields the runs of this mutant set (a check that is off by default)
    plan: tuple[tuple[str, object], ...] = ()


MUTANTS: dict[str, Mutant] = {
    "none": Mutant("the library as it is", "", ()),
    "hold-v-guard": Mutant(
        "a hold's debit is not guarded by v <= capacity - amount + freed",
        "6687217 (concurrency holds: the guard that keeps v within the cap)",
        (
            (
                "core/hold_writes.py",
                'guards = (Guard("v", "<=", cap - amount + freed),)',
                "guards = ()",
            ),
        ),
    ),
    "holds-freed-by-key": Mutant(
        "a writer frees any entry under a key it saw quiet, not exactly the entry it saw",
        "5852e24 (CI's hold history: 3 holds against a cap of 2)",
        (
            (
                "core/holds.py",
                "and (h in quiet or h.key in lapsed",
                "and (h.key in {q.key for q in quiet} or h.key in lapsed",
            ),
        ),
    ),
    "set-result-on-cancelled": Mutant(
        "a failed batch sets the result of a call whose caller was cancelled",
        "5b0d89f / b2e9cd3 (a caller cancelled while its call is queued or in flight)",
        (
            (
                "acquire/lanes.py",
                """        for call in calls:
            if not call.future.done():
                call.future.set_result(Outcome(call.target, error=error))""",
                """        for call in calls:
            call.future.set_result(Outcome(call.target, error=error))""",
            ),
        ),
    ),
    "refusal-judged-later": Mutant(
        "a refusal's statuses are judged at the caller's clock when it resumes, not when the "
        "write was refused",
        "45f0575 (issue 34 item 1: 429s that said 'contended' with no violation)",
        (
            (
                "acquire/admission.py",
                "judged_at = result.refused_at if result.refused_at is not None else self.clock()",
                "judged_at = self.clock()",
            ),
        ),
    ),
    "rounds-out-contended": Mutant(
        "a call whose condition rounds ran out is refused as contended even at its limit",
        "683ae8f (the exactly-once matrix: one call ended contended at its limit)",
        (
            (
                "acquire/admission.py",
                "            raise self.rejection(result.latest, self.clock())\n",
                "            raise RateLimitExceeded(self.statuses(result.latest, self.clock()), "
                "contended=True)\n",
            ),
        ),
    ),
    "give-back-as-renewal": Mutant(
        "a lease's exit writes its hold's give-back as a renewal: the write lands, the lease "
        "counts its unit given back, and the unit stays on the item (a slot leaked until "
        "another writer frees the entry as lapsed; close() reports nothing)",
        "the check of what a closed process left held (world.not_given_back)",
        (
            (
                "acquire/planning.py",
                "        amount = -min(-amount, ledger.amount(item, name, key))\n",
                "        amount = -min(-amount, ledger.amount(item, name, key))\n"
                "        return hold_writes.plan_renew(state, now, holder)\n",
            ),
        ),
    ),
    "alerts-on-refunds": Mutant(
        "a crossing made by debits that were refunded as never kept is stored as an alert "
        "(reference §5.20: only consumption that stays alerts)",
        "issue 41 (a 10 s freeze: 50 % and 80 % alerts at 24 % real spend); until its rule "
        "(alerts/held.py) lands the library is this mutant",
        (
            (
                "alerts/held.py",
                "        refund = _revoking(new_raw, old_raw)\n",
                "        refund = None\n",
            ),
        ),
        missing_rule="alerts/held.py",
        plan=(("alerts_that_stay", True),),
    ),
}


@contextmanager
def applied(name: str) -> Iterator[Path | None]:
    """A copy of the library with mutant `name` in it (None for `none`): its parent directory,
    to put first on PYTHONPATH."""
    mutant = MUTANTS[name]
    if not mutant.edits or (mutant.missing_rule and not (PACKAGE / mutant.missing_rule).exists()):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=f"zael-mutant-{name}-") as tmp:
        copy = Path(tmp) / "zae_limiter"
        shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "cdk"))
        for path, old, new in mutant.edits:
            target = copy / path
            text = target.read_text(encoding="utf-8")
            if text.count(old) != 1:
                raise SystemExit(f"mutant {name} no longer applies: {path} has "
                                 f"{text.count(old)} copies of {old!r}")  # fmt: skip
            target.write_text(text.replace(old, new), encoding="utf-8")
        yield Path(tmp)
