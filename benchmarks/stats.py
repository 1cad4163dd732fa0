"""Summaries of the workers' samples, and ours/theirs ratios (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def merge_timing(blocks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Blocks of sequential calls (worker `timed_loop` results) as one sample."""
    latencies: list[int] = []
    cpu = wall = 0.0
    outcomes: dict[str, int] = {}
    for block in blocks:
        latencies.extend(block["lat_us"])
        cpu += block["cpu_s"]
        wall += block["wall_s"]
        for key, count in block["outcomes"].items():
            outcomes[key] = outcomes.get(key, 0) + count
    n = len(latencies)
    return {
        "n": n,
        "p50_us": percentile(latencies, 50),
        "p90_us": percentile(latencies, 90),
        "p99_us": percentile(latencies, 99),
        "mean_us": sum(latencies) / n if n else math.nan,
        "cpu_us_per_call": cpu * 1e6 / n if n else math.nan,
        "calls_per_s": n / wall if wall else math.nan,
        "outcomes": outcomes,
    }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs; None when undefined (either missing, or theirs is 0 while ours is not 0).

    0 / 0 is 1.0: the same cost.
    """
    if ours is None or theirs is None:
        return None
    if theirs == 0:
        return 1.0 if ours == 0 else None
    return ours / theirs


def ratios(
    ours: dict[str, Any], theirs: dict[str, Any], keys: Sequence[str]
) -> dict[str, float | None]:
    return {key: ratio(ours.get(key), theirs.get(key)) for key in keys}


def merge_contention(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of one contention scenario: sums of counts, throughput over the summed time."""
    if not rounds:
        return {}
    wall = sum(r["wall_s"] for r in rounds)
    attempts = sum(r["attempts"] for r in rounds)
    admitted = sum(r["admitted"] for r in rounds)
    errors: dict[str, int] = {}
    for r in rounds:
        for name, count in r["errors"].items():
            errors[name] = errors.get(name, 0) + count
    return {
        "rounds": len(rounds),
        "attempts": attempts,
        "admitted": admitted,
        "allowed": sum(r["allowed"] for r in rounds),
        "rejected": sum(r["rejected"] for r in rounds),
        "over_admitted": sum(r["over_admitted"] for r in rounds),
        "errors": errors,
        "calls_per_s": attempts / wall if wall else math.nan,
        "admitted_per_s": admitted / wall if wall else math.nan,
        "cpu_us_per_call": sum(r["cpu_s"] for r in rounds) * 1e6 / attempts if attempts else 0,
        "requests_per_call": sum(r["wire_requests"] for r in rounds) / attempts if attempts else 0,
        "wcu_per_admitted": sum(r["wire_wcu"] for r in rounds) / admitted if admitted else 0,
    }
