"""The manifest's record at scale: a small head item plus chunks (docs/manifest.md).

Against DynamoDB Local: a 1,000-entity manifest's record is chunked and read back whole;
progress writes cost 1 WCU each; apply's WCU grow linearly with the manifest; an interrupted apply
resumes from chunks; a record written by the previous version (one item) is still read; DynamoDB
failures come out as public errors.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from support.wire import WireRecorder
from zae_limiter import RateLimiterUnavailable, Repository, ZAELimiterError
from zae_limiter.dynamo import keys
from zae_limiter.manifest import (
    ApplyInterrupted,
    Manifest,
    Ownership,
    Stored,
    apply_manifest,
    loads,
    make_plan,
    plan_manifest,
    read_ownership,
    state,
)
from zae_limiter.manifest.state import lock

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import scale_ours  # noqa: E402

RESOURCES = scale_ours.MANIFEST_RESOURCES


def big_manifest(entities: int) -> Manifest:
    """The scale benchmark's manifest: `entities` entities, each with limits of its own on three
    resources."""
    return loads(scale_ours.manifest_text(entities))


async def record_items(repo: Repository) -> list[dict[str, Any]]:
    return await repo.scope.store.query_all(
        keys.manifest_partition(repo.namespace_id), consistent=True
    )


async def head(repo: Repository) -> dict[str, Any]:
    item = await repo.scope.store.get(keys.manifest_state(repo.namespace_id))
    assert item is not None
    return item


def is_head_write(request: Any) -> bool:
    return bool(
        request.operation == "UpdateItem" and request.params["Key"]["PK"]["S"].endswith("#M")
    )


@pytest.fixture
async def second(live: Repository) -> AsyncIterator[Repository]:
    """A second fresh table on the same engine."""
    name = f"{live.table_name}-b"
    await Repository.create_table(table=name, endpoint_url=live.endpoint_url)
    repo = await Repository.open(table=name, endpoint_url=live.endpoint_url)
    yield repo
    await repo.close()
    await Repository.delete_table(table=name, endpoint_url=live.endpoint_url)


async def test_a_1000_entity_record_is_chunked_and_read_back_whole(live: Repository) -> None:
    """The record of a 1,000-entity x 3-resource manifest (far above one item's 400 KB) is
    written as a small head and chunks, and reads back exactly. The whole apply of that
    manifest is measured by the benchmark (`--phases manifest`); the tests below apply 200."""
    changes = make_plan(big_manifest(1000), Stored(), Ownership()).changes
    assert len(json.dumps([c.as_dict(with_before=False) for c in changes])) > 400_000
    levels = frozenset((f"m-{i}", r) for i in range(1000) for r in RESOURCES)
    managed = Ownership(resources=frozenset(RESOURCES), entity_levels=levels)
    base = await read_ownership(live)
    now = live.scope.clock()
    await lock(live, base, owner="me", managed=managed, pending=changes, now_ms=now)
    during = await read_ownership(live)
    stored = [c.as_dict(with_before=False) for c in during.pending]
    assert stored == [c.as_dict(with_before=False) for c in changes]
    assert (during.entity_levels, during.lock_owner) == (levels, "me")
    assert len(json.dumps(await head(live))) < 1024
    items = await record_items(live)
    assert len(items) > 10
    assert all(len(str(i.get("data", ""))) <= state.CHUNK_CHARS for i in items)
    await state.finish(live, owner="me", managed=managed)
    after = await read_ownership(live)
    assert (after.pending, after.entity_levels, after.lock_owner) == ((), levels, "")
    # the head and the managed set's chunks; the owed work's chunks are gone
    parts = {str(i["SK"]).split("#")[2] for i in await record_items(live) if i["SK"] != "#STATE"}
    assert parts == {"MANAGED"}


async def test_progress_writes_cost_one_wcu_and_apply_wcu_grow_linearly(
    live: Repository, second: Repository, wire: WireRecorder
) -> None:
    with wire.block() as small:
        await apply_manifest(live, big_manifest(100))
    with wire.block() as large:
        await apply_manifest(second, big_manifest(200))
    progress = [r for r in large.requests if is_head_write(r) and "SET done" in str(r.params)]
    assert len(progress) == 200 + 3 + 600
    assert {r.wcu for r in progress} == {1.0}
    # no item written is near the 400 KB item limit
    assert max(r.wcu / max(1, r.items) for r in large.requests) <= 64
    assert large.wcu < 2.1 * small.wcu, (small.summary(), large.summary())
    assert len(large.requests) < 2.1 * len(small.requests)


async def test_an_interrupted_apply_resumes_from_its_chunks(
    live: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Repository.set_limits
    calls = {"n": 0}

    async def flaky(self: Repository, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 250:
            raise RateLimiterUnavailable("injected: DynamoDB went away")
        await original(self, *args, **kwargs)

    monkeypatch.setattr(Repository, "set_limits", flaky)
    manifest = big_manifest(200)
    with pytest.raises(ApplyInterrupted) as stopped:
        await apply_manifest(live, manifest)
    assert stopped.value.done == 200 + 3 + 249
    top = await head(live)
    assert int(top["pending_n"]) > 1  # the owed work spans several chunks
    record = await read_ownership(live)
    assert (record.done, len(record.owed), record.lock_until_ms) == (452, 803 - 452, 0)
    monkeypatch.setattr(Repository, "set_limits", original)
    result = await apply_manifest(live, manifest)
    assert len(result.resumed) == 803 - 452 and result.applied == ()
    plan = await plan_manifest(live, manifest)
    assert (plan.changes, plan.owed) == ((), ())
    parts = {str(i["SK"]).split("#")[2] for i in await record_items(live) if i["SK"] != "#STATE"}
    assert parts == {"MANAGED"}


async def test_a_record_written_by_the_previous_version_is_still_read(
    live: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = big_manifest(3)
    original = Repository.set_limits
    calls = {"n": 0}

    async def flaky(self: Repository, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 4:
            raise RateLimiterUnavailable("injected: DynamoDB went away")
        await original(self, *args, **kwargs)

    monkeypatch.setattr(Repository, "set_limits", flaky)
    with pytest.raises(ApplyInterrupted):
        await apply_manifest(live, manifest)
    monkeypatch.setattr(Repository, "set_limits", original)
    before = await read_ownership(live)
    # rewrite the record as the previous version kept it: one item holding both documents
    ns = live.namespace_id
    items = {str(i["SK"]): i for i in await record_items(live)}
    top = items.pop(keys.MANIFEST_STATE)
    documents = {}
    for part in ("pending", "managed"):
        count, tag = int(top[f"{part}_n"]), str(top[f"{part}_tag"])
        chunks = [keys.manifest_chunk(ns, part.upper(), tag, i)["SK"] for i in range(count)]
        documents[part] = "".join(str(items[sk]["data"]) for sk in chunks)
    old = {k: v for k, v in top.items() if not k.endswith(("_tag", "_n"))} | documents
    stale = [keys.key(str(i["PK"]), str(i["SK"])) for i in items.values()]
    await live.scope.store.batch_delete(stale)
    await live.scope.store.put(old)
    assert await read_ownership(live) == before
    assert len((await plan_manifest(live, manifest)).owed) == len(before.owed) > 0
    result = await apply_manifest(live, manifest)
    assert len(result.resumed) == len(before.owed)
    assert (await plan_manifest(live, manifest)).changes == ()
    assert not {"managed", "pending"} & set(await head(live))


async def test_dynamodb_failures_in_plan_and_apply_are_public_errors(
    live: Repository, second: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    await Repository.delete_table(table=second.table_name, endpoint_url=second.endpoint_url)
    with pytest.raises(ZAELimiterError, match="reading the manifest's record"):
        await plan_manifest(second, big_manifest(1))
    await Repository.create_table(table=second.table_name, endpoint_url=second.endpoint_url)
    changes = make_plan(big_manifest(1000), Stored(), Ownership()).changes
    # a chunk larger than DynamoDB's 400 KB item limit: DynamoDB refuses the write
    monkeypatch.setattr(state, "CHUNK_CHARS", 10_000_000)
    base = await read_ownership(live)
    with pytest.raises(RateLimiterUnavailable, match="re-run `zae-limiter limits apply`"):
        await lock(live, base, owner="me", managed=base, pending=changes, now_ms=live.scope.clock())
    record = await read_ownership(live)
    assert (record.pending, record.lock_until_ms) == ((), 0)  # the lock was released
