"""How cost grows, for what only our library has: the aggregator and `limits apply` manifests.

Imported by ours' worker only. 0.17.0's aggregator is a Lambda of its own stack (it does not
run on DynamoDB Local's stream from a library call) and 0.17.0 has no manifest: neither is
measured for it, and the report says so.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from benchmarks.impls import Ours
from benchmarks.scenarios import Tables
from zae_limiter import Limit

AGGREGATOR_BATCHES = (100, 1_000)
AGGREGATOR_ENTITIES = 50


def _transaction_items(block: Any) -> Counter[str]:
    """Items of the block's applied TransactWriteItems by kind (Put, Update, ConditionCheck,
    Delete); `cancelled` counts the transactions that were not applied."""
    kinds: Counter[str] = Counter()
    for request in block.requests:
        if request.operation == "TransactWriteItems" and request.failed:
            kinds["cancelled"] += 1
        elif request.operation == "TransactWriteItems":
            for item in request.params.get("TransactItems", []):
                kinds.update(item.keys())
    return kinds


async def _stream_records(endpoint_url: str, table: str, wanted: int) -> list[dict[str, Any]]:
    """At least `wanted` bucket-change records of the table's stream (Lambda's record shape)."""
    from zae_limiter.local.stream_runner import StreamRunner

    records: list[dict[str, Any]] = []
    async with StreamRunner(table, endpoint_url, batch_size=1_000) as runner:
        for _ in range(200):
            events = await runner.poll()
            if not events and len(records) >= wanted:
                break
            for event in events:
                records += event["Records"]
    return records


#: Deliveries of one batch at most: the first, then Lambda's redeliveries of what failed.
MAX_DELIVERIES = 5


async def _deliver(aggregator: Any, batch: list[dict[str, Any]]) -> list[Any]:
    """One batch as Lambda's stream event source mapping delivers it with
    ReportBatchItemFailures: when records fail (an engine too slow to answer), the batch is
    delivered again from the first failed record. Returns each delivery's outcome."""
    outcomes = [await aggregator.process(batch)]
    while outcomes[-1].failures and len(outcomes) < MAX_DELIVERIES:
        batch = batch[min(outcomes[-1].failures) :]
        outcomes.append(await aggregator.process(batch))
    return outcomes


def _consumed(batch: list[dict[str, Any]]) -> dict[str, int]:
    """What the batch's records debited (milli-units, by limit): each counted once."""
    from zae_limiter.dynamo import stream_records
    from zae_limiter.usage import records as usage_records

    total: Counter[str] = Counter()
    for raw in batch:
        change = usage_records.bucket_change(stream_records.parse_record(raw))
        if change is not None:
            total.update(change.counts.consumed)
    return dict(total)


async def _counted(limiter: Any) -> dict[str, int]:
    """What the snapshots count on the resource (milli-units, by limit), every entity."""
    summary = await limiter.get_usage_summary(resource="api")
    return {name: round(value * 1000) for name, value in summary.total.items()}


def _minus(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


async def aggregator_batches(
    endpoint_url: str, recorder: Any, *, sizes: tuple[int, ...] = AGGREGATOR_BATCHES
) -> list[dict[str, Any]]:
    """Acquires on AGGREGATOR_ENTITIES users make stream records; batches of each size are
    processed by one `Aggregator.process` call each (one invocation), then delivered again."""
    from zae_limiter.dynamo import stream_records
    from zae_limiter.local.stream_runner import StreamRunner
    from zae_limiter.usage import records as usage_records

    tables = Tables(Ours(endpoint_url))
    try:
        table, _, limiter = await tables.fresh("aggregator")
        await limiter.set_resource_defaults("api", [Limit.per_minute("t", 10**12)])
        entities = [f"agg-{i}" for i in range(AGGREGATOR_ENTITIES)]
        calls = iter(range(sum(sizes) + 2 * AGGREGATOR_ENTITIES))

        async def worker() -> None:
            for i in calls:
                async with limiter.acquire(
                    entities[i % AGGREGATOR_ENTITIES], "api", consume={"t": 1 + i % 7}
                ):
                    pass

        await asyncio.gather(*(worker() for _ in range(16)))
        records = [
            r
            for r in await _stream_records(endpoint_url, table, sum(sizes))
            if usage_records.bucket_change(stream_records.parse_record(r)) is not None
        ]
        rows = []
        async with StreamRunner(table, endpoint_url) as runner:
            aggregator = runner.aggregator
            await aggregator.check_version()
            offset = 0
            counted_before = await _counted(limiter)
            for size in sizes:
                batch = records[offset : offset + size]
                offset += size
                row: dict[str, Any] = {"batch": len(batch), "expected": _consumed(batch)}
                for attempt in ("first", "replay"):
                    with recorder.block() as block:
                        t0 = time.perf_counter()
                        outcomes = await _deliver(aggregator, batch)
                        wall = time.perf_counter() - t0
                    kinds = _transaction_items(block)
                    counted_after = await _counted(limiter)
                    row[attempt] = {
                        "deliveries": len(outcomes),
                        "applied": sum(o.applied for o in outcomes),
                        "duplicates": sum(o.duplicates for o in outcomes),
                        "failures": len(outcomes[-1].failures),
                        "counted": _minus(counted_after, counted_before),
                        "wall_s": wall,
                        "records_per_s": len(batch) / wall if wall else None,
                        "requests": len(block.requests),
                        "wcu": block.wcu,
                        "transactions": block.by_operation.get("TransactWriteItems", 0),
                        "cancelled_transactions": kinds.get("cancelled", 0),
                        "snapshot_writes": kinds.get("Update", 0),
                        "snapshot_writes_per_record": kinds.get("Update", 0) / len(batch),
                        "wcu_per_record": block.wcu / len(batch),
                        "items": dict(kinds),
                    }
                counted_before = counted_after
                rows.append(row)
        return rows
    finally:
        await tables.close()


MANIFEST_RESOURCES = ("search", "upload", "export")


def manifest_text(entities: int) -> str:
    """A manifest of `entities` entities, each with limits of its own on three resources."""
    lines = ["namespace: default", "resources:"]
    lines += [f"  {r}: {{limits: {{rpm: {{capacity: 60}}}}}}" for r in MANIFEST_RESOURCES]
    lines.append("entities:")
    for i in range(entities):
        levels = ", ".join(
            f"{r}: {{limits: {{rpm: {{capacity: {100 + i % 50 + n}}}}}}}"
            for n, r in enumerate(MANIFEST_RESOURCES)
        )
        lines.append(f"  m-{i}: {{resources: {{{levels}}}}}")
    return "\n".join(lines) + "\n"


def _wire(block: Any, wall: float) -> dict[str, Any]:
    reads = sum(
        n
        for op, n in block.by_operation.items()
        if op in ("GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems")
    )
    wcu_by_operation: Counter[str] = Counter()
    largest_write = 0.0
    for request in block.requests:
        wcu_by_operation[request.operation] += request.wcu
        largest_write = max(largest_write, request.wcu)
    return {
        "requests": len(block.requests),
        "reads": reads,
        "wcu_by_operation": dict(wcu_by_operation),
        "largest_write_wcu": largest_write,
        "writes": len(block.requests) - reads,
        "rcu": block.rcu,
        "wcu": block.wcu,
        "by_operation": block.by_operation,
        "wall_s": wall,
    }


async def manifest_apply(endpoint_url: str, recorder: Any, *, entities: int) -> dict[str, Any]:
    """`limits apply` (plan, then apply) of the manifest on a fresh table, then a no-change plan."""
    from zae_limiter.manifest import apply_manifest, loads, plan_manifest

    manifest = loads(manifest_text(entities))
    tables = Tables(Ours(endpoint_url))
    try:
        _, repo, _ = await tables.fresh("manifest")
        with recorder.block() as block:
            t0 = time.perf_counter()
            try:
                result = await apply_manifest(repo, manifest)
            except Exception as exc:  # reported, not raised (any type): what it cost until then
                return {
                    "entities": entities,
                    "resources": len(MANIFEST_RESOURCES),
                    "error": f"{type(exc).__name__}: {exc}"[:400],
                    "apply": _wire(block, time.perf_counter() - t0),
                }
            applied = _wire(block, time.perf_counter() - t0)
        with recorder.block() as block:
            t0 = time.perf_counter()
            plan = await plan_manifest(repo, manifest)
            planned = _wire(block, time.perf_counter() - t0)
        return {
            "entities": entities,
            "resources": len(MANIFEST_RESOURCES),
            "changes_applied": len(result.applied),
            "apply": applied,
            "plan_changes": len(plan.changes) + len(plan.owed),
            "plan_unchanged": plan.unchanged,
            "plan": planned,
        }
    finally:
        await tables.close()
