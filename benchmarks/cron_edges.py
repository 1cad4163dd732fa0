"""CPU per quota edge and per schedule-entry look-up, for each cron shape (run on demand).

    python -m benchmarks.cron_edges            # writes benchmarks/results/<date>-cron-edges.json
    python -m benchmarks.cron_edges --n 200    # fewer samples

No DynamoDB: this times the pure core (runtime/zae_limiter/core/cron.py and schedule.py) in
this process, CPU time (`time.process_time_ns`) per call, median and p90 over instants spread
across several years (so the last-bracket memo in `Cron` rarely answers; `cached` is the case
it does). Target: next edge <= 50 µs for every shape.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zae_limiter.core import cron, schedule

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = (
    ("weekly", "0 0 * * 1", "Europe/Paris"),
    ("daily", "0 0 * * *", "America/New_York"),
    ("monthly", "0 0 1 * *", "UTC"),
    ("hourly-half", "30 * * * *", "Europe/Paris"),
    ("every-5-min", "*/5 * * * *", "UTC"),
    ("office-hours", "* 9-17 * * 1-5", "Europe/Paris"),
    ("friday-13", "0 0 13 * 5", "UTC"),
    ("leap-monday", "0 0 29 2 1", "UTC"),
)
START = int(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
SPAN = 4 * 365 * 86_400_000


def _per_call_us(call: Callable[[int], Any], instants: list[int]) -> dict[str, float]:
    samples = []
    for at in instants:
        began = time.process_time_ns()
        call(at)
        samples.append((time.process_time_ns() - began) / 1000)
    samples.sort()
    return {
        "median_us": round(statistics.median(samples), 1),
        "p90_us": round(samples[int(len(samples) * 0.9) - 1], 1),
    }


def measure(n: int = 1000, seed: int = 21) -> dict[str, Any]:
    """Per shape: next edge, last edge, a repeated look-up inside one period, and the first
    schedule-entry change within a week (the entry scan), each in µs of CPU."""
    rng = random.Random(seed)
    instants = [START + rng.randrange(SPAN) for _ in range(n)]
    out: dict[str, Any] = {}
    for label, expr, tz in SHAPES:
        parsed = cron.parse(expr, tz)
        entries = schedule.encode([{"cron": expr, "tz": tz, "scale": 2}])
        last = parsed.last_edge_ms(instants[0])
        out[label] = {
            "cron": expr,
            "tz": tz,
            "next_edge": _per_call_us(parsed.next_edge_ms, instants),
            "last_edge": _per_call_us(cron.parse(expr, tz).last_edge_ms, instants),
            "cached": _per_call_us(parsed.last_edge_ms, [last or 0] * min(n, 200)),
            "window_change": _per_call_us(
                lambda at, w=entries: schedule.next_change.__wrapped__(
                    w, schedule.active(w, at), at // schedule.MINUTE_MS, 7 * 24 * 60
                ),
                instants[: max(1, n // 5)],
            ),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="instants per shape")
    args = parser.parse_args()
    results = measure(args.n)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{dt.date.today().isoformat()}-cron-edges.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(
        f"{'shape':14} {'cron':16} {'next':>8} {'last':>8} {'cached':>8} {'window':>8}  (median µs)"
    )
    for label, row in results.items():
        print(
            f"{label:14} {row['cron']:16} {row['next_edge']['median_us']:8} "
            f"{row['last_edge']['median_us']:8} {row['cached']['median_us']:8} "
            f"{row['window_change']['median_us']:8}"
        )
    print(f"written to {path}")


if __name__ == "__main__":
    main()
