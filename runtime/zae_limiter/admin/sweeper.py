"""The sweeper: what TTL deletion and a transaction's atomicity do elsewhere, on a table without
them (multi-Region strong consistency, docs/multi-region.md). It runs on the aggregator's
schedule (the Lambda's scheduled event; `Repository.sweep` anywhere else).

One sweep walks the table once, a page at a time, and:

* **deletes what TTL would have**: an item past its `ttl` (a bucket only while it is not split,
  as `BucketImage.expired` reads it), only if its `ttl` is unchanged since it was read; an audit
  event is archived first when an archive is given (as the stream's TTL removals are elsewhere);
* **finishes interrupted changes**: journal entries older than `sequenced.RESUME_AFTER_MS` (a
  change of several items rolled forward or dropped; a balance operation finished), and splits
  whose new shard was never created;
* **removes bookkeeping left by stopped writers**: balance marks older than a day on bucket
  items, and aggregator entries on snapshots whose records' markers exist.

Every step is conditional on what the sweep read, so it never undoes a newer write, and two
sweeps at once only repeat each other.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .. import audit
from ..acquire.dynamo_io import DynamoBucketIO
from ..acquire.planning import ItemMaker
from ..acquire.split_items import SETTLE_AFTER_MS
from ..acquire.values import ItemChanged, Unavailable
from ..dynamo import bucket_items, codec, keys, sequenced
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed, DynamoError
from ..models import BucketOperationResult
from ..usage.records import ARCHIVE_PREFIX
from ..usage.snapshot_writes import ENTRY_PREFIX
from .balance_call import BalanceCall
from .balance_writes import JOURNAL_KIND, MARK_KEPT_MS, MARK_PREFIX, finish_pending

log = logging.getLogger("zae_limiter")

PAGE = 500
ENTRY_KEPT_MS = 3_600_000  # an aggregator entry this old belongs to a stopped delivery
ArchiveSink = Callable[[str, bytes], Awaitable[None]]


@dataclass
class SweepReport:
    """What one sweep did."""

    scanned: int = 0
    deleted: int = 0
    archived: int = 0
    changes_finished: int = 0
    changes_dropped: int = 0
    operations_finished: int = 0
    splits_finished: int = 0
    marks_removed: int = 0
    entries_removed: int = 0


class Sweeper:
    """Sweeps one table (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Callable[[], int],
        *,
        archive: ArchiveSink | None = None,
        ttl_multiplier: int = 7,
        audit_retention_days: int = audit.DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._store, self._clock = store, clock
        self._archive = archive
        self._ttl_multiplier = ttl_multiplier
        self._retention_days = audit_retention_days
        self._buckets = DynamoBucketIO(store)

    async def sweep(self, *, pages: int | None = None) -> SweepReport:
        """Remove what TTL would have and finish interrupted changes, on a table without TTL or
        transactions (multi-Region strong consistency; docs/multi-region.md): one walk of the
        whole table, at most `pages` pages of 500 items. Safe on any table, and to run twice."""
        report = SweepReport()
        start: dict[str, Any] | None = None
        walked = 0
        while pages is None or walked < pages:
            found, start = await self._store.scan(limit=PAGE, start_key=start)
            walked += 1
            report.scanned += len(found)
            await self._page(found, report)
            if not start:
                break
        await self._journals(report)
        return report

    async def _page(self, found: list[dict[str, Any]], report: SweepReport) -> None:
        now = self._clock()
        expired = [item for item in found if _expired(item, now)]
        audits = [item for item in expired if _is_audit(item)]
        if audits and self._archive is not None:
            await self._archive(*_archive_object(audits, now))
            report.archived += len(audits)
        for item in expired:
            report.deleted += await self._delete(item)
        gone = {id(item) for item in expired}
        for item in found:
            if id(item) in gone:
                continue
            if keys.is_bucket({"PK": item["PK"], "SK": item["SK"]}):
                await self._bucket(item, now, report)
            elif any(str(name).startswith(ENTRY_PREFIX) for name in item):
                report.entries_removed += await self._entries(item, now)

    async def _delete(self, item: dict[str, Any]) -> int:
        try:
            await self._store.transport.call(
                "DeleteItem",
                {
                    "TableName": self._store.table,
                    "Key": codec.encode_item({"PK": item["PK"], "SK": item["SK"]}),
                    "ConditionExpression": "#ttl = :ttl",
                    "ExpressionAttributeNames": {"#ttl": "ttl"},
                    "ExpressionAttributeValues": {":ttl": codec.encode(item["ttl"])},
                },
                write=True,
            )
        except ConditionFailed:
            return 0  # written again since it was read: no longer expired
        return 1

    async def _bucket(self, item: dict[str, Any], now: int, report: SweepReport) -> None:
        image = bucket_items.parse(item)
        if image.sibling is not None and now - image.sibling.written_at > SETTLE_AFTER_MS:
            try:
                await self._buckets.settle_sibling(image)
                report.splits_finished += 1
            except (ItemChanged, Unavailable) as exc:
                log.warning("finishing the split of %s failed: %s", image.address, exc)
        stale = [
            name
            for name, value in item.items()
            if str(name).startswith(MARK_PREFIX)
            and now - int((value or {}).get("t", 0)) > MARK_KEPT_MS
        ]
        if stale:
            report.marks_removed += await self._remove(item, stale[:8])

    async def _entries(self, item: dict[str, Any], now: int) -> int:
        """An aggregator entry whose record's marker exists is a stopped delivery's: removed."""
        old = [
            str(name)
            for name, value in item.items()
            if str(name).startswith(ENTRY_PREFIX) and now - int(value) > ENTRY_KEPT_MS
        ]
        if not old:
            return 0
        markers = await self._store.batch_get(
            [keys.aggregation_marker(name[len(ENTRY_PREFIX) :]) for name in old], consistent=True
        )
        applied = {str(m["PK"]) for m in markers}
        done = [n for n in old if keys.aggregation_marker(n[len(ENTRY_PREFIX) :])["PK"] in applied]
        return await self._remove(item, done[:50]) if done else 0

    async def _remove(self, item: dict[str, Any], names: list[str]) -> int:
        aliases = {f"#r{i}": name for i, name in enumerate(names)}
        try:
            await self._store.transport.call(
                "UpdateItem",
                {
                    "TableName": self._store.table,
                    "Key": codec.encode_item({"PK": item["PK"], "SK": item["SK"]}),
                    "UpdateExpression": "REMOVE " + ", ".join(aliases),
                    "ConditionExpression": " AND ".join(f"attribute_exists({a})" for a in aliases),
                    "ExpressionAttributeNames": aliases,
                },
                write=True,
            )
        except ConditionFailed:
            return 0
        return len(names)

    async def _journals(self, report: SweepReport) -> None:
        now = self._clock()
        finished, dropped = await sequenced.resume(self._store, now)
        report.changes_finished += finished
        report.changes_dropped += dropped
        for entry in await self._store.query_all(sequenced.JOURNAL_PK, consistent=True):
            if entry.get("kind") != JOURNAL_KIND:
                continue
            if now - sequenced.token_ms(str(entry["SK"])) < sequenced.RESUME_AFTER_MS:
                continue
            try:
                if await self._finish_operation(entry):
                    report.operations_finished += 1
            except (DynamoError, Unavailable) as exc:
                log.warning("finishing balance operation %s failed: %s", entry["SK"], exc)

    async def _finish_operation(self, entry: dict[str, Any]) -> bool:
        """A balance operation that stopped half way (`balance_writes`)."""
        ns = str(entry["ns"])
        record = await self._store.get(keys.key(str(entry["record"]), "#OP"), consistent=True)
        if record is None or record.get("state") != "pending" or record.get("op") != entry["SK"]:
            await self._store.delete({"PK": sequenced.JOURNAL_PK, "SK": str(entry["SK"])})
            return False

        async def audit_item(call: BalanceCall, result: BucketOperationResult) -> dict[str, Any]:
            return audit.event_item(
                ns,
                action=call.action,
                entity_id=call.entity_id,
                principal=call.principal,
                resource=call.resource,
                details={
                    "limits": list(result.amounts),
                    "amounts": result.amounts,
                    "shards": result.shards,
                    "idempotency_key": call.idempotency_key,
                    "finished_by": "sweeper",
                },
                now_ms=self._clock(),
                retention_days=self._retention_days,
            )

        maker = ItemMaker(ns, self._ttl_multiplier)
        done = await finish_pending(self._store, ns, record, self._clock, maker, audit_item)
        return done is not None


def _expired(item: dict[str, Any], now_ms: int) -> bool:
    ttl = item.get("ttl")
    if not isinstance(ttl, int) or ttl * 1000 >= now_ms:
        return False
    is_bucket = keys.is_bucket({"PK": item["PK"], "SK": item["SK"]})
    return not is_bucket or int(item.get("sc", 1)) == 1  # a split bucket's items never expire


def _is_audit(item: dict[str, Any]) -> bool:
    ns, _, rest = str(item["PK"]).partition("#A#")
    return bool(rest) and bool(ns) and not ns.startswith(keys.RESERVED)


def _archive_object(items: list[dict[str, Any]], now_ms: int) -> tuple[str, bytes]:
    """(S3 key, gzip JSON lines) of expired audit events, as the stream archive writes them."""
    when = datetime.fromtimestamp(now_ms / 1000, UTC)
    lines = [
        {
            "namespace_id": str(item["PK"]).partition("#A#")[0],
            **audit.event_from_item(item).to_dict(),
        }
        for item in items
    ]
    name = f"sweep-{lines[0]['event_id']}-{lines[-1]['event_id']}.jsonl.gz"
    key = f"{ARCHIVE_PREFIX}/year={when:%Y}/month={when:%m}/day={when:%d}/{name}"
    text = "".join(json.dumps(line, sort_keys=True, default=str) + "\n" for line in lines)
    return key, gzip.compress(text.encode(), mtime=0)
