"""The sweeper (admin/sweeper.py) on a table without TTL or transactions: it removes exactly
what TTL would have (archiving audit events), finishes changes stopped half way, and removes
bookkeeping stopped writers left.

It sweeps as deployed: the aggregator Lambda's scheduled event (`SWEEP_EVENT`) in the deploying
Region, archiving to S3 (moto's server), and every request of these tests is checked against the
policy of the role that sends it in a multi-Region deployment of the construct (`iam_checked`,
support/iam_check.py): the aggregator's for the sweep, each Region's replica for the table."""

from __future__ import annotations

import gzip
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import pytest
from region_support import MrscTable, stop_a_split_half_way, stop_after

from aggregator.test_usage_aggregation import _ledger_batch
from support.aggregator_lambda import invoke, loaded_handler
from support.iam_check import Checked, synthesize_policies
from support.iam_eval import Deployment
from support.regions import DEFAULT_REGIONS
from zae_limiter import Limit, RateLimiter
from zae_limiter.acquire.split_items import SETTLE_AFTER_MS
from zae_limiter.admin.balance_writes import MARK_KEPT_MS, MARK_PREFIX, BalanceWrites
from zae_limiter.admin.sweeper import ENTRY_KEPT_MS
from zae_limiter.cdk.multi_region import ENV_REPLICA_REGIONS, SWEEP_EVENT
from zae_limiter.dynamo import codec, keys, sequenced, transport
from zae_limiter.local.stream_runner import StreamRunner
from zae_limiter.usage.snapshot_writes import ENTRY_PREFIX, SnapshotWrites

DEPLOYING, *REPLICAS = DEFAULT_REGIONS


@pytest.fixture(scope="module")
def iam_deployment() -> Deployment:
    """The construct deployed in the simulated Regions: the table's replicas where they are."""
    return Deployment(region=DEPLOYING, replica_regions=tuple(REPLICAS))


@pytest.fixture(scope="module")
def iam_policies(iam_deployment: Deployment) -> dict[str, list[dict[str, Any]]]:
    return synthesize_policies(iam_deployment)


@pytest.fixture(autouse=True)
def _iam(iam_checked: Checked) -> None:
    """Every request of these tests is one its role's synthesized policy allows."""


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "backoff_scale", 0.0)


@pytest.fixture(scope="module")
def handler() -> Iterator[ModuleType]:
    yield from loaded_handler()


@dataclass
class Swept:
    """The aggregator's sweep of one table and where it archives."""

    handler: ModuleType
    s3: Any
    bucket: str

    async def __call__(self) -> dict[str, int]:
        """One scheduled sweep: what it did (`SweepReport`'s fields)."""
        response = await invoke(self.handler, dict(SWEEP_EVENT))
        report: dict[str, int] = response["sweep"]
        return report

    def archived(self) -> list[tuple[str, bytes]]:
        listed = self.s3.list_objects_v2(Bucket=self.bucket).get("Contents", [])
        return [
            (o["Key"], self.s3.get_object(Bucket=self.bucket, Key=o["Key"])["Body"].read())
            for o in listed
        ]


@pytest.fixture
async def sweep(
    mrsc: MrscTable, handler: ModuleType, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Swept]:
    """The aggregator's environment as the construct sets it for this table (its Regions, the
    archive bucket), on the tests' clock."""
    bucket = f"zl-sweep-{secrets.token_hex(4)}"
    s3 = boto3.client("s3", endpoint_url=moto_endpoint)
    s3.create_bucket(Bucket=bucket)
    for name, value in {
        "TABLE_NAME": mrsc.name,
        "ZAEL_ENDPOINT_URL": mrsc.sim.url(DEPLOYING),
        "AWS_REGION": DEPLOYING,
        "AWS_DEFAULT_REGION": DEPLOYING,
        ENV_REPLICA_REGIONS: ",".join((DEPLOYING, *REPLICAS)),
        "ARCHIVE_BUCKET": bucket,
        "AWS_ENDPOINT_URL_S3": moto_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(handler, "_now_ms", mrsc.clock)
    yield Swept(handler, s3, bucket)
    s3.close()


async def test_what_ttl_would_remove_is_removed_and_audit_events_archived_first(
    mrsc: MrscTable, sweep: Swept, iam_checked: Checked
) -> None:
    repo = await mrsc.open(REPLICAS[0])
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10)])
    await repo.set_shards("split", "api", 2)  # a split bucket's items never expire
    async with limiter.acquire("idle", "api", {"rpm": 1}):  # expires in minutes
        pass
    await repo.top_up("idle", "api", {"rpm": 1}, idempotency_key="order-1")  # 3 days
    first = await sweep()
    assert (first["deleted"], first["archived"]) == (0, 0)  # nothing has expired yet
    mrsc.clock.advance(days=91)  # past every retention: audit 90 days, operation records 3
    report = await sweep()
    store = repo.scope.store
    ns = repo.namespace_id
    assert await store.get(keys.bucket(ns, "idle", "api")) is None
    assert await store.get(keys.operation_record(ns, "order-1")) is None
    assert await store.get(keys.bucket(ns, "split", "api", 1)) is not None
    events = await repo.get_audit_events("idle")
    assert events == []
    archived = sweep.archived()
    assert report["archived"] >= 2 and len(archived) == 1  # top-up and sharding events, one object
    key, body = archived[0]
    assert key.startswith("audit/year=") and b"order-1" in gzip.decompress(body)
    again = await sweep()
    assert (again["deleted"], again["archived"]) == (0, 0)
    assert mrsc.sim.total("transaction") == 0
    by_aggregator = {(s, o) for role, s, o in iam_checked.calls if role == "aggregator"}
    assert {("dynamodb", "Scan"), ("dynamodb", "DeleteItem"), ("s3", "PutObject")} <= by_aggregator


async def test_a_top_up_without_a_key_stopped_half_way_is_finished_by_the_sweeper(
    mrsc: MrscTable, sweep: Swept, monkeypatch: pytest.MonkeyPatch, ddb_client: Any
) -> None:
    """Its audit event keeps the table's audit retention (the version record's, set by the
    deployment: 400 days here), as `Repository.sweep` does."""
    await ddb_client.update_item(
        TableName=mrsc.name,
        Key=codec.encode_item(keys.version_record()),
        UpdateExpression="SET audit_retention_days = :days",
        ExpressionAttributeValues={":days": {"N": "400"}},
    )
    repo = await mrsc.open(REPLICAS[0])
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 100, cron="0 0 * * *")])
    await repo.set_shards("acme", "api", 4)
    write_shard = stop_after(monkeypatch, BalanceWrites, "_shard", 1)
    with pytest.raises(RuntimeError, match="stopped"):
        await repo.top_up("acme", "api", {"jobs": 40})
    monkeypatch.setattr(BalanceWrites, "_shard", write_shard)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 110}
    assert (await repo.sweep()).operations_finished == 0  # too recent: it may still be running
    mrsc.clock.advance(seconds=sequenced.RESUME_AFTER_MS / 1000 + 1)
    assert (await sweep())["operations_finished"] == 1
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}
    events = await repo.scope.store.query_all(keys.audit_partition(repo.namespace_id, "acme"))
    finished = [e for e in events if '"finished_by": "sweeper"' in str(e["details"])]
    assert [e["ttl"] for e in finished] == [mrsc.clock() // 1000 + 400 * 86_400]
    assert (await repo.sweep()).operations_finished == 0  # finished once (the admin's sweep too)
    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 140}


async def test_a_change_stopped_after_its_decision_is_rolled_forward_and_one_before_dropped(
    mrsc: MrscTable, sweep: Swept, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open(REPLICAS[1])
    apply = stop_after(monkeypatch, sequenced, "_apply", 1)  # the entity record (the decision)
    with pytest.raises(Exception, match="stopped"):
        await repo.create_entity("org-1")  # the record lands; version and audit do not
    stop_after(monkeypatch, sequenced, "_apply", 0)
    with pytest.raises(Exception, match="stopped"):
        await repo.create_entity("org-2")  # nothing lands (its journal entry does)
    monkeypatch.setattr(sequenced, "_apply", apply)
    assert await repo.get_entity("org-1") is not None
    assert await repo.get_audit_events("org-1") == []
    mrsc.clock.advance(seconds=sequenced.RESUME_AFTER_MS / 1000 + 1)
    report = await sweep()
    assert (report["changes_finished"], report["changes_dropped"]) == (1, 1)
    assert [event.action for event in await repo.get_audit_events("org-1")] == ["entity_created"]
    assert await repo.get_entity("org-2") is None
    journal = await repo.scope.store.query_all(sequenced.JOURNAL_PK, consistent=True)
    assert journal == []


async def test_a_split_stopped_before_its_new_shard_was_created_is_finished(
    mrsc: MrscTable, sweep: Swept, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open(REPLICAS[0])
    limiter = await stop_a_split_half_way(repo, monkeypatch)
    store, ns = repo.scope.store, repo.namespace_id
    assert await store.get(keys.bucket(ns, "org", "api", 1)) is None
    mrsc.clock.advance(SETTLE_AFTER_MS + 1)
    assert (await sweep())["splits_finished"] == 1
    shards = [await store.get(keys.bucket(ns, "org", "api", shard)) for shard in (0, 1)]
    assert [(s is not None and "sp" not in s) for s in shards] == [True, True]
    assert (await limiter.check_availability("org", "api")).available == {"jobs": 60}
    assert (await sweep())["splits_finished"] == 0


async def test_balance_marks_older_than_a_day_are_removed(mrsc: MrscTable, sweep: Swept) -> None:
    repo = await mrsc.open(REPLICAS[1])
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.quota("jobs", 100, cron="0 0 * * *")])
    await repo.set_shards("acme", "api", 2)  # split: its items never expire
    await repo.top_up("acme", "api", {"jobs": 10})
    store, ns = repo.scope.store, repo.namespace_id

    async def marks() -> int:
        shards = [await store.get(keys.bucket(ns, "acme", "api", s)) for s in (0, 1)]
        return sum(1 for item in shards if item for name in item if name.startswith(MARK_PREFIX))

    assert (await limiter.check_availability("acme", "api")).available == {"jobs": 110}
    assert await marks() == 2 and (await sweep())["marks_removed"] == 0
    mrsc.clock.advance(MARK_KEPT_MS + 1)
    assert (await sweep())["marks_removed"] == 2
    assert await marks() == 0


async def test_entries_of_a_delivery_stopped_before_removing_them_are_removed(
    mrsc: MrscTable, sweep: Swept, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = await mrsc.open(DEPLOYING)  # the aggregator reads the deploying Region's stream
    limiter = RateLimiter(repo)
    async with StreamRunner.from_repository(repo, clock=mrsc.clock) as runner:
        records = await _ledger_batch(limiter, runner)
        stop_after(monkeypatch, SnapshotWrites, "_forget", 0)  # markers written, entries kept
        await runner.aggregator.process(records)  # its retry finds the markers: nothing to do
    store = repo.scope.store

    async def entries() -> int:
        snapshots = await store.query_all(f"{repo.namespace_id}#U#user-1", consistent=True)
        return sum(1 for s in snapshots for name in s if name.startswith(ENTRY_PREFIX))

    left = await entries()
    assert left > 0 and (await sweep())["entries_removed"] == 0
    mrsc.clock.advance(ENTRY_KEPT_MS + 1)
    assert (await sweep())["entries_removed"] >= left  # user-1's and the other users'
    assert await entries() == 0
