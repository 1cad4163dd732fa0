"""`make sim`: simulated histories from many seeds, checked (docs/contributing.md).

`python -m support.sim --seeds N [--first S] [--plan drawn|ci] [--mutant NAME] [--jobs J]`
(with tests/ on the path) runs seeds S .. S+N-1 in J processes and prints the simulated
operations (and how many decisions reached the table rather than a cache), operations per
second of wall time, a digest of all the histories, and the first failing seed, shrunk to a short
plan printed as a test to paste. `--mutant` runs the same against a copy of the library with
one of the bugs of `mutants.MUTANTS` put back; `--list` names them. Exits 1 when a seed failed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from support.sim.world import Plan

MUTANT_ENV = "ZAEL_SIM_MUTANT"


@dataclass(frozen=True)
class Outcome:
    seed: int
    operations: int
    reached: int
    requests: int
    digest: str
    problems: tuple[str, ...]


def planned(plan_name: str, seed: int) -> Plan:
    """The plan of `seed`, with what the mutant under test needs (`Mutant.plan`)."""
    from support.sim.mutants import MUTANTS
    from support.sim.plans import PLANS

    plan = PLANS[plan_name](seed)
    mutant = MUTANTS.get(os.environ.get(MUTANT_ENV, "none"))
    changes: dict[str, Any] = dict(mutant.plan) if mutant is not None else {}
    return replace(plan, **changes)


def one(plan_name: str, seed: int) -> Outcome:
    from support.sim.world import simulate

    try:
        result = simulate(planned(plan_name, seed))
    except Exception as exc:  # the simulation itself failed: report it as the seed's problem
        return Outcome(seed, 0, 0, 0, "", (f"the simulation raised {exc!r}",))
    return Outcome(seed, result.operations, result.reached_table, result.requests,
                   result.digest, tuple(result.problems))  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--plan", default="drawn")
    parser.add_argument("--mutant", default="none")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--stop", action="store_true", help="stop at the first failing seed")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--skip", default="", help="seeds left out (comma-separated: those that "
                        "fail on the library as it is, when measuring a mutant)")  # fmt: skip
    parser.add_argument("--list", action="store_true", help="the mutants, then exit")
    args = parser.parse_args()
    from support.sim.mutants import MUTANTS, applied

    if args.list:
        for name, mutant in MUTANTS.items():
            print(f"{name}: {mutant.what} ({mutant.history or 'main'})")
        return 0
    if args.mutant != "none" and os.environ.get(MUTANT_ENV) != args.mutant:
        with applied(args.mutant) as copy:  # the same command on the mutated copy
            tests = Path(__file__).resolve().parents[2]
            path = [str(tests)] if copy is None else [str(copy), str(tests)]  # None: as it is
            env = {**os.environ, MUTANT_ENV: args.mutant, "PYTHONPATH": os.pathsep.join(path)}
            return subprocess.call([sys.executable, "-m", "support.sim", *sys.argv[1:]], env=env)
    return run(args)


def run(args: argparse.Namespace) -> int:
    import zae_limiter

    print(f"sim: seeds {args.first}..{args.first + args.seeds - 1}, plan {args.plan}, mutant "
          f"{args.mutant} ({Path(zae_limiter.__file__).parent}), {args.jobs} jobs",
          flush=True)  # fmt: skip
    started = time.perf_counter()
    outcomes: dict[int, Outcome] = {}
    skipped = {int(seed) for seed in args.skip.split(",") if seed}
    seeds = [seed for seed in range(args.first, args.first + args.seeds) if seed not in skipped]
    failed: list[int] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for outcome in pool.map(one, [args.plan] * len(seeds), seeds, chunksize=4):
            outcomes[outcome.seed] = outcome
            if outcome.problems:
                failed.append(outcome.seed)
                print(f"sim: seed {outcome.seed} FAILED: {outcome.problems[0][:300]}", flush=True)
                if args.stop:
                    pool.shutdown(cancel_futures=True)
                    break
    wall = time.perf_counter() - started
    operations = sum(o.operations for o in outcomes.values())
    reached = sum(o.reached for o in outcomes.values())
    requests = sum(o.requests for o in outcomes.values())
    digest = hashlib.sha256()
    for seed in sorted(outcomes):
        digest.update(f"{seed}:{outcomes[seed].digest}\n".encode())
    print(f"sim: {len(outcomes)} seeds, {operations:,} simulated operations ({reached:,} decided "
          f"at the table, {operations - reached:,} answered from a cache; {requests:,} requests) "
          f"in {wall:.1f} s: {operations / wall:,.0f} operations/s, {reached / wall:,.0f} "
          "decided at the table/s")  # fmt: skip
    print(f"sim: digest of all histories {digest.hexdigest()}")
    if not failed:
        print("sim: no failing seed")
        return 0
    first = min(failed)
    print(f"sim: {len(failed)} failing seeds; first failing seed {first} (seeds tried up to it: "
          f"{sum(seed <= first for seed in seeds)})")  # fmt: skip
    for problem in outcomes[first].problems[:10]:
        print(f"  - {problem[:400]}")
    if not args.no_shrink:
        shrunk(args, first)
    return 1


def shrunk(args: argparse.Namespace, seed: int) -> None:
    from support.sim.plans import as_test, kinds, shrink
    from support.sim.world import simulate

    started = time.perf_counter()
    plan = planned(args.plan, seed)
    found = kinds(simulate(plan).problems)
    plan = shrink(plan, lambda result: bool(kinds(result.problems) & found))
    result = simulate(plan)
    print(f"sim: seed {seed} shrunk in {time.perf_counter() - started:.1f} s to "
          f"{result.operations} operations: {plan.describe()}")  # fmt: skip
    name = f"sim_seed_{seed}" + (f"_{args.mutant.replace('-', '_')}" if args.mutant != "none"
                                 else "")  # fmt: skip
    print("sim: a test to paste into tests/sim/:\n")
    print(as_test(plan, name, list(result.problems)))


if __name__ == "__main__":
    sys.exit(main())
