"""The aggregator on the simulated table's stream, alongside the history, delivered as Lambda
delivers it, and checked.

While the processes run, each stream shard's `Consumer` polls the table's item changes (those
the construct's filter lets through: bucket items inserted or modified, `cdk.aggregator.
stream_filters`), in order per item, and hands them in batches to the library's `Aggregator`
(usage snapshots, threshold alerts), as Lambda's event source mapping does:

- a batch whose records failed is delivered again from the first failed record, a batch that
  raised is delivered again whole, and some batches are delivered twice (a retry after a
  timeout);
- the aggregator runs in a *container* (its own `Link`, with its own faults, and a fresh
  `Aggregator`): a container dies mid-batch now and then, or passes Lambda's timeout; its
  requests on the wire still land, and a new container gets the batch again while the old one's
  writes may still arrive (concurrent invocations);
- with several stream shards, their consumers run at once on different items.

When the processes are done, the consumers catch up (and, where the aggregator holds crossings
until no refund can take them back, `alerts.held`, time passes beyond the hold and it sweeps).
Then (`check_stream`):

- every bucket's consumption reached the daily usage snapshots exactly once (§12 item 9);
- no alert is stored twice, and none for a crossing the stream does not show; while the
  aggregator stores every crossing (no hold), every crossing is stored;
- alerts only on consumption that stays (§5.20, `alert_check`), when `Plan.alerts_that_stay`
  asks for it (by default: when the library holds crossings).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from support.sim.network import Faults, Link
from support.sim.table import Change, SimTable
from zae_limiter import Repository
from zae_limiter.alerts.detect import crossings
from zae_limiter.alerts.event import AlertEvent, Crossing
from zae_limiter.dynamo import keys
from zae_limiter.dynamo.bucket_attributes import REVOKED
from zae_limiter.dynamo.store import Store
from zae_limiter.dynamo.stream_records import StreamRecord, parse_record
from zae_limiter.dynamo.transport import DynamoError, Transport
from zae_limiter.usage.aggregator import Aggregator

Expected = dict[str, list[tuple[Crossing, StreamRecord]]]
#: Faults the aggregator's requests meet (its writes are transactions with markers).
AGGREGATOR_FAULTS = Faults(rate=0.1, kinds=("lost", "latency", "throttle", "5xx"))
ATTEMPTS = 50  # failed deliveries in a row from one record before the stream gives up
LAMBDA_TIMEOUT_S = 60.0
RETRY_PAUSE_S = 1.0  # before a batch that failed or whose container died is delivered again
TWICE = 0.1  # of batches delivered again after they succeeded


@dataclass(frozen=True)
class Delivery:
    """How the stream reaches the aggregator in one run."""

    shards: int = 1  # stream shards, each with its own consumer (concurrent invocations)
    batch: int = 40  # the event source mapping's batch size
    poll_s: float = 1.0  # how often a consumer looks for new records
    deaths: float = 0.05  # of deliveries whose container dies mid-batch
    faults: Faults = AGGREGATOR_FAULTS


def _shard_of(change: Change, shards: int) -> int:
    """The stream shard of an item's changes (by its key, the same in every run)."""
    return zlib.crc32(change.keys["PK"]["S"].encode()) % shards


def delivered(change: Change) -> bool:
    """Whether the construct's stream filter passes this change to the aggregator."""
    return change.event in ("INSERT", "MODIFY") and change.keys["SK"]["S"] == keys.BUCKET


@dataclass
class Consumer:
    """One stream shard's Lambda (see the module docstring)."""

    table: SimTable
    name: str
    shard: int
    delivery: Delivery
    rng: random.Random
    open_transport: Callable[[Link], Transport]
    clock: Callable[[], int]
    seen: int = 0  # changes of the table looked at
    queue: list[dict[str, Any]] = field(default_factory=list)  # this shard's records, in order
    position: int = 0  # the first record not yet applied
    aggregator: Aggregator | None = None
    link: Link | None = None
    deliveries: int = 0
    deaths: int = 0
    stalls: int = 0
    problems: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    def _poll(self) -> None:
        changes = self.table.changes(self.name)
        shards = self.delivery.shards
        for change in changes[self.seen :]:
            if delivered(change) and (shards == 1 or _shard_of(change, shards) == self.shard):
                self.queue.append(change.record(self.name))
        self.seen = len(changes)

    def _container(self) -> Aggregator:
        if self.aggregator is None:
            link = Link(self.table, random.Random(self.rng.randrange(2**32)), self.delivery.faults)
            self.links.append(link)
            self.link = link
            self.aggregator = Aggregator(Store(self.open_transport(link), self.name),
                                         clock=self.clock)  # fmt: skip
        return self.aggregator

    def _die(self) -> None:
        """The container is gone: its requests on the wire land, nothing else it does."""
        assert self.link is not None
        self.link.kill()
        self.aggregator = self.link = None
        self.deaths += 1

    async def run(self, stopping: asyncio.Event) -> None:
        """Deliver what the stream holds, poll, until `stopping` is set and all is applied."""
        while not self.problems:
            self._poll()
            if self.position < len(self.queue):
                await self._deliver()
                continue
            if stopping.is_set():
                return
            await asyncio.sleep(self.delivery.poll_s)

    async def _deliver(self) -> None:
        batch = self.queue[self.position : self.position + self.delivery.batch]
        aggregator = self._container()
        self.deliveries += 1
        call = asyncio.ensure_future(aggregator.process(batch))
        dies = self.rng.random() < self.delivery.deaths
        limit = self.rng.uniform(0.0, 0.1) if dies else LAMBDA_TIMEOUT_S
        done, _ = await asyncio.wait({call}, timeout=limit)
        if not done:  # died mid-batch, or Lambda's timeout: the batch comes again
            self._die()
            await asyncio.sleep(RETRY_PAUSE_S)
            return
        try:
            outcome = call.result()
        except DynamoError:
            self._stalled("raised")
            await asyncio.sleep(RETRY_PAUSE_S)
            return
        failed = {f["itemIdentifier"] for f in outcome.batch_item_failures()}
        if failed:
            first = min(i for i, r in enumerate(batch) if r["dynamodb"]["SequenceNumber"] in failed)
            self.position += first
            if first:
                self.stalls = 0  # the records before it are applied: a new first failure
            self._stalled(f"kept failing records {sorted(failed)[:3]}")
            await asyncio.sleep(RETRY_PAUSE_S / 2)
            return
        self.stalls = 0
        if self.rng.random() < TWICE:
            return  # delivered again: Lambda retries a batch whose answer it did not get
        self.position += len(batch)

    def _stalled(self, how: str) -> None:
        self.stalls += 1
        if self.stalls > ATTEMPTS:
            self.problems.append(f"the aggregator {how} {ATTEMPTS} times in a row")

    async def settle(self) -> None:
        """Where the aggregator holds crossings (`alerts.held`): let the holds pass, then sweep
        until nothing is held."""
        aggregator = self._container()
        held = getattr(aggregator, "held", None)
        pk = getattr(keys, "HELD_CROSSINGS_PK", None)
        if held is None or pk is None:
            return
        await asyncio.sleep(held.hold_ms / 1000 + 130.0)  # the hold plus the skew allowed
        for _ in range(ATTEMPTS):
            partition = self.table.table(self.name).partitions.get(pk, {})
            if all("ended" in item for item in partition.values()):  # ended: dropped, stored
                return
            with contextlib.suppress(DynamoError):
                await held.sweep_now()
            await asyncio.sleep(RETRY_PAUSE_S)
        self.problems.append("held crossings stayed held after the history")


class Stream:
    """Every consumer of one run's stream."""

    def __init__(
        self,
        table: SimTable,
        name: str,
        delivery: Delivery,
        seed: int,
        open_transport: Callable[[Link], Transport],
        clock: Callable[[], int],
    ) -> None:
        rng = random.Random(f"aggregator/{seed}")
        self.consumers = []
        for shard in range(delivery.shards):
            drawn = random.Random(rng.randrange(2**32))
            self.consumers.append(
                Consumer(table, name, shard, delivery, drawn, open_transport, clock)
            )
        self.stopping = asyncio.Event()
        self.tasks = [asyncio.ensure_future(c.run(self.stopping)) for c in self.consumers]

    async def finish(self) -> None:
        """Catch up with the stream (the history is over), then let held crossings settle."""
        self.stopping.set()
        await asyncio.gather(*self.tasks)
        for consumer in self.consumers:
            await consumer.settle()

    @property
    def problems(self) -> list[str]:
        return [problem for c in self.consumers for problem in c.problems]

    def counts(self) -> dict[str, int]:
        return {
            "records": sum(len(c.queue) for c in self.consumers),
            "deliveries": sum(c.deliveries for c in self.consumers),
            "container deaths": sum(c.deaths for c in self.consumers),
            "aggregator requests": sum(link.requests for c in self.consumers for link in c.links),
        }


def expected_alerts(table: SimTable, name: str) -> dict[str, list[tuple[Crossing, StreamRecord]]]:
    """Every crossing the stream shows, with its record, by alert id (a crossing again in the
    same period after a top-up, or after a crossing a refund took back, has the same id)."""
    out: dict[str, list[tuple[Crossing, StreamRecord]]] = {}
    for change in table.changes(name):
        if not delivered(change) or not _consumed_more(change):
            continue
        record = parse_record(change.record(name))
        for crossing in crossings(record):
            out.setdefault(crossing.alert_id, []).append((crossing, record))
    return out


def revoking_refunds(table: SimTable, name: str) -> dict[str, list[StreamRecord]]:
    """Per item key, the records of refunds of debits never kept (they set a new `REVOKED`
    marker, docs/alerts.md), in stream order."""
    out: dict[str, list[StreamRecord]] = {}
    for change in table.changes(name):
        if not delivered(change) or change.new is None or REVOKED not in change.new:
            continue
        if change.old is not None and change.old.get(REVOKED) == change.new[REVOKED]:
            continue
        record = parse_record(change.record(name))
        out.setdefault(record.pk, []).append(record)
    return out


def _consumed_more(change: Change) -> bool:
    """Whether a limit's net consumption (``L.<limit>.t``) went up in this change, read from the
    wire form: `alerts.detect.crossings` finds nothing otherwise (about half the records are
    refunds, exits and restamps; decoding them twice took 5 % of a run's CPU)."""
    new, old = change.new, change.old
    if new is None or old is None or new.get("g") != old.get("g"):
        return True
    before = old.get("L", {}).get("M", {})
    for limit, fields in new.get("L", {}).get("M", {}).items():
        spent = fields.get("M", {}).get("t", {}).get("N", "0")
        earlier = before.get(limit, {}).get("M", {}).get("t", {}).get("N", "0")
        if int(spent) > int(earlier):
            return True
    return False


async def stored_alerts(repo: Repository) -> list[AlertEvent]:
    out: list[AlertEvent] = []
    cursor: str | None = None
    while True:
        page, cursor = await repo.get_alerts(limit=100, cursor=cursor)
        out += page
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


def holds_crossings() -> bool:
    """Whether this library's aggregator holds crossings until no refund can take them back
    (§5.20's "only consumption that stays", `alerts.held`)."""
    import importlib.util

    return importlib.util.find_spec("zae_limiter.alerts.held") is not None


async def check_stream(
    table: SimTable,
    name: str,
    repo: Repository,
    consumed: Counter[str],
    judge_stays: Callable[[Expected, list[AlertEvent]], list[str]] | None,
) -> tuple[list[str], dict[str, int]]:
    """The problems of the aggregated stream (see the module docstring) and counts;
    `judge_stays(expected, stored)`: alerts on consumption that did not stay (None: not judged)."""
    problems = []
    expected = expected_alerts(table, name)
    events = await stored_alerts(repo)
    stored = Counter(event.alert_id for event in events)
    twice = sorted(a for a, n in stored.items() if n > 1)
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if twice:
        problems.append(f"alerts stored twice: {twice[:3]}")
    if missing and not holds_crossings():  # held crossings may be dropped (refunded)
        problems.append(f"{len(missing)} crossings without an alert: {missing[:3]}")
    if extra:
        problems.append(f"{len(extra)} alerts for no crossing in the stream: {extra[:3]}")
    if judge_stays is not None:
        problems += judge_stays(expected, events)
    counted = await snapshot_consumption(repo, {b.split("|")[0] for b in consumed})
    for bucket in sorted(consumed):
        if counted[bucket] != consumed[bucket]:
            problems.append(f"{bucket}: snapshots counted {counted[bucket]}, the bucket "
                            f"consumed {consumed[bucket]}")  # fmt: skip
    counts = {"crossings": len(expected), "alerts": sum(stored.values())}
    return problems, counts
