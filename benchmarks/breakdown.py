"""Where a warm call's time goes: client, wire, engine (the `breakdown` phase of benchmarks.run).

Both workers talk to DynamoDB Local through the recording proxy (benchmarks/latency_proxy.py,
a process of its own). Each worker times its warm single-resource and three-bucket calls with
CLOCK_MONOTONIC (`call_spans`); the proxy stamps each request with the same clock. Per call:

- engine: the time DynamoDB Local was answering (the union of [sent, answered] of its requests);
- wire: the rest of the time a request was out (the union of [head, written], less the engine):
  the proxy's hop and the transfer both ways;
- client: everything else in the call: building and signing requests, parsing answers, the
  limiter's own work, and waiting between round trips.

The proxy adds a hop, so these calls are slower than the timing phase's; the split is what
counts. Sizes (request body, expressions, the answer: the ALL_NEW image) are per request.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.stats import percentile

CASES = ("single", "three")


async def call_spans(call: Callable[[int], Awaitable[Any]], n: int) -> list[list[int]]:
    """[start, end] (CLOCK_MONOTONIC ns) of n sequential calls (worker side, stdlib only)."""
    spans = []
    for i in range(n):
        t0 = time.monotonic_ns()
        await call(i)
        spans.append([t0, time.monotonic_ns()])
    return spans


VARIANTS = ("as_sent", "no_image", "one_action")


def variant(request: dict[str, Any], which: str) -> dict[str, Any]:
    """Ours' warm UpdateItem (as the floor replays it) changed in one way (pure):

    as_sent: unchanged; no_image: ReturnValues NONE instead of ALL_NEW; one_action: only the
    first SET action of the update expression (names and values it no longer uses dropped).
    """
    out = dict(request)
    if which == "no_image":
        out["ReturnValues"] = "NONE"
    elif which == "one_action":
        first = out["UpdateExpression"].split(",")[0]
        out["UpdateExpression"] = first
        used = " ".join((first, out.get("ConditionExpression", "")))
        out["ExpressionAttributeNames"] = {
            k: v
            for k, v in out.get("ExpressionAttributeNames", {}).items()
            if re.search(re.escape(k) + r"\b", used)
        }
        values = {
            k: v
            for k, v in out.get("ExpressionAttributeValues", {}).items()
            if re.search(re.escape(k) + r"\b", used)
        }
        if values:
            out["ExpressionAttributeValues"] = values
        else:
            out.pop("ExpressionAttributeValues", None)
    return out


async def variant_spans(
    client: Any, request: dict[str, Any], which: str, n: int
) -> list[list[int]]:
    """n sequential sends of one variant of `request` with the bare client (worker side)."""
    changed = variant(request, which)

    async def send(_: int) -> None:
        await client.update_item(**changed)

    return await call_spans(send, n)


def start_proxy(upstream: str, log_path: Path) -> tuple[subprocess.Popen[str], str]:
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.latency_proxy",
            "--upstream",
            upstream,
            "--log",
            str(log_path),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proxy.stdout is not None
    port = proxy.stdout.readline().strip()
    if not port:
        proxy.kill()
        raise RuntimeError("the recording proxy did not start")
    return proxy, f"http://127.0.0.1:{port}"


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def divide_call(span: list[int], requests: list[dict[str, Any]]) -> dict[str, float]:
    """One call's time in µs: client, wire, engine (pure)."""
    t0, t1 = span
    out = _union([(r["head"], r["written"]) for r in requests])
    engine = _union([(r["sent"], r["answered"]) for r in requests])
    return {
        "total_us": (t1 - t0) / 1000,
        "client_us": (t1 - t0 - out) / 1000,
        "wire_us": (out - engine) / 1000,
        "engine_us": engine / 1000,
        "before_send_us": (
            (min(r["head"] for r in requests) - t0) / 1000 if requests else (t1 - t0) / 1000
        ),
        "requests": len(requests),
    }


def summarise(spans: list[list[int]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per call and per request of one implementation's case (pure)."""
    records = sorted(records, key=lambda r: r["head"])
    calls, mine = [], []
    for span in spans:
        inside = [r for r in records if span[0] <= r["head"] <= span[1]]
        calls.append(divide_call(span, inside))
        mine += inside
    out: dict[str, Any] = {"calls": len(calls)}
    for key in ("total_us", "client_us", "wire_us", "engine_us", "before_send_us", "requests"):
        out[key] = percentile([c[key] for c in calls], 50)
    by_op: dict[str, list[dict[str, Any]]] = {}
    for r in mine:
        by_op.setdefault(r["op"], []).append(r)
    out["per_request"] = {
        op: {
            "count_per_call": len(rs) / max(len(calls), 1),
            "engine_us": percentile([(r["answered"] - r["sent"]) / 1000 for r in rs], 50),
            **{
                key: percentile([r[key] for r in rs], 50)
                for key in (
                    "request_bytes",
                    "answer_bytes",
                    "update_expression_chars",
                    "condition_expression_chars",
                    "names",
                    "values",
                )
            },
            "return_values": sorted({r["return_values"] for r in rs}),
        }
        for op, rs in by_op.items()
    }
    return out


def read_records(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]


def run_breakdown(
    workers: dict[str, Any],
    spawn_at: Callable[[str, str], Any],
    upstream: str,
    log_dir: Path,
    *,
    calls: int,
    block: int,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Both implementations through one recording proxy, alternating blocks of each case."""
    log_path = log_dir / "proxy.jsonl"
    proxy, url = start_proxy(upstream, log_path)
    spans: dict[str, dict[str, list[list[int]]]] = {
        impl: {case: [] for case in CASES} for impl in ("ours", "theirs")
    }
    proxied: dict[str, Any] = {}
    try:
        for impl in ("ours", "theirs"):
            proxied[impl] = spawn_at(impl, url)
            proxied[impl].call("timing_setup", warm_rounds=2)
        for number in range(max(1, calls // block)):
            order = ("ours", "theirs") if number % 2 == 0 else ("theirs", "ours")
            for case in CASES:
                for impl in order:
                    spans[impl][case] += proxied[impl].call("spans", case=case, n=block)
        log(f"breakdown: {calls} calls per case per implementation through the proxy")
        proxied["ours"].call("floor_setup")
        variant_spans_of = {
            which: proxied["ours"].call("variant_spans", which=which, n=max(calls // 2, 10))
            for which in VARIANTS
        }
    finally:
        for worker in proxied.values():
            worker.close()
        proxy.terminate()  # our own child, by its handle
        proxy.wait(timeout=10)
    records = read_records(log_path)
    out: dict[str, Any] = {
        impl: {case: summarise(spans[impl][case], records) for case in CASES} for impl in spans
    }
    out["variants"] = {
        which: summarise(s, records)["per_request"].get("UpdateItem", {})
        for which, s in variant_spans_of.items()
    }
    return out


# --- report --------------------------------------------------------------------------------


def section(data: dict[str, Any]) -> str:
    from benchmarks.report import WHO_LABEL, num, table

    rows = []
    for case in CASES:
        for impl in ("ours", "theirs"):
            s = data[impl][case]
            rows.append(
                [
                    case if impl == "ours" else "",
                    WHO_LABEL[impl],
                    num(s["requests"]),
                    f"{s['total_us'] / 1000:.2f}",
                    f"{s['client_us'] / 1000:.2f}",
                    f"{s['before_send_us'] / 1000:.2f}",
                    f"{s['wire_us'] / 1000:.2f}",
                    f"{s['engine_us'] / 1000:.2f}",
                ]
            )
    text = table(
        [
            "call",
            "who",
            "requests",
            "total ms",
            "client ms",
            "of which before the first send",
            "wire ms",
            "engine ms",
        ],
        rows,
    )
    rows = []
    for case in CASES:
        for impl in ("ours", "theirs"):
            for op, r in data[impl][case]["per_request"].items():
                rows.append(
                    [
                        case,
                        WHO_LABEL[impl],
                        op,
                        num(r["count_per_call"], 2),
                        f"{r['engine_us'] / 1000:.2f}",
                        num(r["request_bytes"]),
                        num(r["update_expression_chars"]),
                        num(r["condition_expression_chars"]),
                        f"{num(r['names'])} / {num(r['values'])}",
                        num(r["answer_bytes"]),
                        ", ".join(r["return_values"]),
                    ]
                )
    text += "\n\nPer request (medians):\n\n" + table(
        [
            "call",
            "who",
            "operation",
            "per call",
            "engine ms",
            "request bytes",
            "update expression chars",
            "condition chars",
            "names / values",
            "answer bytes",
            "ReturnValues",
        ],
        rows,
    )
    variants = data.get("variants")
    if variants:
        labels = {
            "as_sent": "ours' warm UpdateItem as sent (condition reduced to attribute_exists)",
            "no_image": "the same, ReturnValues NONE",
            "one_action": "the same, only the first SET action",
        }
        text += "\n\nWhat in the request costs engine time (single resource, bare client):\n\n"
        text += table(
            ["request", "engine ms (median)", "request bytes", "answer bytes"],
            [
                [
                    labels[w],
                    f"{v['engine_us'] / 1000:.2f}",
                    num(v["request_bytes"]),
                    num(v["answer_bytes"]),
                ]
                for w, v in variants.items()
                if v
            ],
        )
    return text + (
        "\n\nMedians per call. Engine = DynamoDB Local answering (one loopback hop "
        "from the proxy included); wire = the proxy's hop and the transfers; client "
        "= the rest of the call (the library's work, and its waits between round "
        "trips). Through the proxy every call is slower than in the timing phase."
    )


def plot(data: dict[str, Any], path: Path, title: str) -> Path:
    import matplotlib.pyplot as plt

    from benchmarks.report import WHO_LABEL

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for axis, case in zip(axes, CASES, strict=True):
        labels = [WHO_LABEL[i] for i in ("ours", "theirs")]
        bottom = [0.0, 0.0]
        for part, colour in (
            ("client_us", "tab:blue"),
            ("wire_us", "tab:gray"),
            ("engine_us", "tab:red"),
        ):
            values = [data[i][case][part] / 1000 for i in ("ours", "theirs")]
            axis.bar(labels, values, bottom=bottom, color=colour, label=part[:-3])
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        axis.set_title(case, fontsize=10)
        axis.set_ylabel("median ms per call")
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
