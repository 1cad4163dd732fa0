"""The aggregator on the simulated table's stream, delivered as Lambda delivers it, checked.

After a simulated history, every item change the table recorded goes to the library's
`Aggregator` (usage snapshots, threshold alerts) in batches of drawn sizes through its own faulty
`Link`, as DynamoDB Streams and Lambda deliver them: a batch whose records failed is delivered
again from the first failed record, a batch that raised is delivered again whole, and some
batches are delivered twice (a Lambda retry after a timeout). Then:

- every bucket's consumption reached the daily usage snapshots exactly once (§12 item 9): what
  the snapshots count per (entity, resource, limit) is what the bucket items consumed;
- every threshold crossing the stream shows is stored as one alert, none twice, none that the
  stream does not show (docs/alerts.md: exactly once per crossing, redeliveries included).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from support.sim.network import Faults, Link
from support.sim.table import SimTable
from zae_limiter import Repository
from zae_limiter.alerts.detect import crossings
from zae_limiter.dynamo.store import Store
from zae_limiter.dynamo.stream_records import parse_record
from zae_limiter.dynamo.transport import DynamoError, Transport
from zae_limiter.usage.aggregator import Aggregator

#: Faults the aggregator's requests meet (its writes are transactions with markers).
AGGREGATOR_FAULTS = Faults(rate=0.1, kinds=("lost", "latency", "throttle", "5xx"))
ATTEMPTS = 50  # deliveries of one batch at most before the stream gives up (a stall)


async def aggregate(
    table: SimTable, name: str, transport: Transport, rng: random.Random, clock: Any
) -> tuple[int, int]:
    """Deliver the stream to an aggregator until every record is applied; returns (records,
    deliveries)."""
    aggregator = Aggregator(Store(transport, name), clock=clock)
    records = [change.record(name) for change in table.changes(name)]
    position = deliveries = stalls = 0
    while position < len(records):
        size = rng.randint(1, 40)
        batch = records[position : position + size]
        deliveries += 1
        try:
            outcome = await aggregator.process(batch)
        except DynamoError:
            stalls += 1
            if stalls > ATTEMPTS:
                raise
            await asyncio.sleep(1.0)
            continue
        failed = {f["itemIdentifier"] for f in outcome.batch_item_failures()}
        if failed:
            first = min(i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed)
            position += first
            stalls += 1
            if stalls > ATTEMPTS:
                raise AssertionError(f"the aggregator kept failing records: {sorted(failed)[:3]}")
            await asyncio.sleep(0.5)
            continue
        stalls = 0
        if rng.random() < 0.1:
            continue  # delivered again: Lambda retries a batch whose answer it did not get
        position += len(batch)
    return len(records), deliveries


def expected_alerts(table: SimTable, name: str) -> Counter[str]:
    """The alert ids of every crossing the stream shows (each crossing counted once)."""
    out: Counter[str] = Counter()
    for change in table.changes(name):
        for crossing in crossings(parse_record(change.record(name))):
            out[crossing.alert_id] += 1
    return out


async def stored_alerts(repo: Repository) -> Counter[str]:
    out: Counter[str] = Counter()
    cursor: str | None = None
    while True:
        page, cursor = await repo.get_alerts(limit=100, cursor=cursor)
        out.update(alert.alert_id for alert in page)
        if cursor is None:
            return out


async def snapshot_consumption(repo: Repository, entities: set[str]) -> Counter[str]:
    """Per bucket (entity|resource|limit): what the daily snapshots counted."""
    out: Counter[str] = Counter()
    for entity in sorted(entities):
        next_key: str | None = None
        while True:
            page, next_key = await repo.get_usage_snapshots(
                entity_id=entity, window_type="daily", limit=100, next_key=next_key
            )
            for snapshot in page:
                for limit, count in snapshot.counters.items():
                    out[f"{entity}|{snapshot.resource}|{limit}"] += count
            if next_key is None:
                break
    return out


async def check_stream(
    table: SimTable,
    name: str,
    repo: Repository,
    transport: Transport,
    rng: random.Random,
    clock: Any,
    consumed: Counter[str],
) -> tuple[list[str], dict[str, int]]:
    """Aggregate the stream, then the problems (see the module docstring) and counts."""
    records, deliveries = await aggregate(table, name, transport, rng, clock)
    problems = []
    expected = expected_alerts(table, name)
    stored = await stored_alerts(repo)
    twice = sorted(a for a, n in stored.items() if n > 1)
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if twice:
        problems.append(f"alerts stored twice: {twice[:3]}")
    if missing:
        problems.append(f"{len(missing)} crossings without an alert: {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} alerts for no crossing in the stream: {extra[:3]}")
    counted = await snapshot_consumption(repo, {b.split("|")[0] for b in consumed})
    for bucket in sorted(consumed):
        if counted[bucket] != consumed[bucket]:
            problems.append(f"{bucket}: snapshots counted {counted[bucket]}, the bucket "
                            f"consumed {consumed[bucket]}")  # fmt: skip
    counts = {"records": records, "deliveries": deliveries, "alerts": sum(stored.values())}
    return problems, counts


def aggregator_link(table: SimTable, seed: int) -> Link:
    return Link(table, random.Random(f"aggregator/{seed}"), AGGREGATOR_FAULTS)
