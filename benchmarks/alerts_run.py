"""Scale check of threshold alerts (docs/alerts.md): debits over many entities while the
background aggregator is killed (SIGKILL) and restarted; prints expected vs stored vs published.

Every entity has a hard quota of 150 with `alert_at=(50, 80, 100)`; each debit takes 1 to k units
(k per entity, so entities end anywhere from well below 50 % to 100 %). Expected crossings come
from what was admitted; stored ones from `get_alerts`; published ones from the aggregator's
`--alerts-log` (the local stand-in for EventBridge). Killing with SIGKILL may land between a
publication and its mark, so a published line may repeat: the figure says how many did (the
stable `alert_id` is what consumers deduplicate on).

    python -m benchmarks.alerts_run [--debits 10000] [--entities 200] [--restarts 2] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository
from zae_limiter.local.engine import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)
from zae_limiter.local.stream_runner import start_aggregator_process

CAPACITY = 150
THRESHOLDS = (50, 80, 100)
#: Once a year, so no period ends during a run.
RESET_CRON = "0 0 1 1 *"


@dataclass(frozen=True)
class AlertsRun:
    debits: int
    admitted_units: int
    entities: int
    restarts: int
    expected: int
    stored: int
    published_lines: int
    published_distinct: int
    missing: int  # expected but not stored
    unexpected: int  # stored but not expected
    unpublished: int  # stored but never published


def expected_crossings(used: dict[str, int]) -> set[tuple[str, int]]:
    return {(e, t) for e, u in used.items() for t in THRESHOLDS if u * 100 >= t * CAPACITY}


def _kill(pid: int) -> None:
    """SIGKILL the aggregator this run started (by its pid) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


async def _debit(
    limiter: RateLimiter, entity: str, amount: int, used: Counter[str], gate: asyncio.Semaphore
) -> None:
    async with gate:
        try:
            async with limiter.acquire(entity, "budget", consume={"weekly": amount}):
                used[entity] += amount
        except RateLimitExceeded:
            pass


async def _stored(repo: Repository) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    cursor: str | None = None
    while True:
        page, cursor = await repo.get_alerts(limit=1000, cursor=cursor)
        out += [(a.entity_id, a.threshold, a.alert_id) for a in page]
        if cursor is None:
            return out


def _published(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [json.loads(line)["alert_id"] for line in path.read_text().splitlines() if line]


async def run_alerts(
    endpoint_url: str,
    table: str,
    workdir: Path,
    *,
    debits: int = 10_000,
    entities: int = 200,
    restarts: int = 2,
    seed: int = 7,
    concurrency: int = 16,
    settle_s: float = 300.0,
    hold_s: int = 2,
) -> AlertsRun:
    """Run the debits, killing and restarting the aggregator `restarts` times; wait until every
    expected alert is stored and published (or `settle_s` passes) and count. Crossings are held
    `hold_s` (the aggregator's ALERT_HOLD_SECONDS; docs/alerts.md): short, so that the run
    waits seconds, not the default five minutes, and kills still fall inside holds."""
    await Repository.create_table(table=table, endpoint_url=endpoint_url, region=LOCAL_REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint_url, region=LOCAL_REGION)
    log = workdir / "alerts.jsonl"
    pid = 0

    def start() -> int:
        return start_aggregator_process(
            table=table,
            endpoint_url=endpoint_url,
            region=LOCAL_REGION,
            log_path=workdir / "aggregator.log",
            status_path=workdir / "aggregator.json",
            checkpoint_path=workdir / "checkpoint.json",
            alerts_log=log,
            poll_interval=0.05,
            settings={"ALERT_HOLD_SECONDS": str(hold_s)},
        ).pid

    try:
        quota = Limit.quota("weekly", CAPACITY, cron=RESET_CRON, alert_at=THRESHOLDS)
        await repo.set_resource_defaults("budget", [quota])
        rng = random.Random(seed)
        names = [f"user-{i:04d}" for i in range(entities)]
        largest = {name: rng.randint(1, 6) for name in names}
        plan = [(e, rng.randint(1, largest[e])) for e in names for _ in range(debits // entities)]
        rng.shuffle(plan)
        limiter = RateLimiter(repo)
        used: Counter[str] = Counter()
        gate = asyncio.Semaphore(concurrency)
        pid = start()
        step = len(plan) // (restarts + 1)
        for part in range(restarts + 1):
            chunk = plan[part * step : None if part == restarts else (part + 1) * step]
            await asyncio.gather(*(_debit(limiter, e, a, used, gate) for e, a in chunk))
            if part < restarts:
                _kill(pid)
                pid = start()
        expected = expected_crossings(dict(used))
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            stored = await _stored(repo)
            stored_ids = {i for _, _, i in stored}
            if len(stored) >= len(expected) and stored_ids <= set(_published(log)):
                break
            await asyncio.sleep(0.5)
        stored = await _stored(repo)
        published = _published(log)
        found = {(e, t) for e, t, _ in stored}
        return AlertsRun(
            debits=len(plan),
            admitted_units=sum(used.values()),
            entities=entities,
            restarts=restarts,
            expected=len(expected),
            stored=len(stored),
            published_lines=len(published),
            published_distinct=len(set(published)),
            missing=len(expected - found),
            unexpected=len(found - expected),
            unpublished=len({i for _, _, i in stored} - set(published)),
        )
    finally:
        if pid:
            _kill(pid)
        await repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--debits", type=int, default=10_000)
    parser.add_argument("--entities", type=int, default=200)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    engine = start_engine(engine="dynamodb-local")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result = asyncio.run(
                run_alerts(
                    engine.endpoint_url,
                    "alerts-run",
                    Path(tmp),
                    debits=args.debits,
                    entities=args.entities,
                    restarts=args.restarts,
                    seed=args.seed,
                )
            )
    finally:
        engine.stop()
    print(json.dumps(asdict(result), indent=2))
    print(
        f"expected {result.expected}, stored {result.stored}, published "
        f"{result.published_distinct} distinct ({result.published_lines} lines)"
    )


if __name__ == "__main__":
    main()
