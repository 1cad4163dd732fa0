"""Resumable data migrations, on DynamoDB Local.

The migration here is a test fixture, registered only in these tests: from a fake schema 1.0.0 to
1.1.0, it rewrites the `fixture#` items in pages of 3 (`shape` v1 -> v2), then writes a marker
item. Failures are injected part-way; the counters say how often each page and item was handled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from zae_limiter import Repository
from zae_limiter.dynamo import keys
from zae_limiter.upgrade import (
    Migration,
    MigrationContext,
    MigrationRegistry,
    Step,
    UpgradeError,
    scan_step,
    upgrade,
)
from zae_limiter.upgrade.migrations import DONE, RUNNING, Progress, read_progress
from zae_limiter.versioning import LIBRARY_VERSION

pytestmark = pytest.mark.ddb

MIGRATION = "fixture-1.1.0"
ITEMS = 10
PAGE_SIZE = 3
MARK = keys.key("fixture#mark", "_")


@dataclass
class Fixture:
    """The fixture migration's counters and failure switches."""

    pages: list[str | None] = field(default_factory=list)  # the cursor each page was given
    writes: Counter[str] = field(default_factory=Counter)  # item PK -> rewrites applied
    marks: int = 0  # calls of the second step
    fail_before_write: int | None = None  # raise before the n-th rewrite of the whole test
    fail_mark: bool = False
    on_first_write: Any = None  # awaited before the first rewrite

    def registry(self) -> MigrationRegistry:
        tag = scan_step("tag-items", self.rewrite, page_size=PAGE_SIZE)

        async def tag_page(ctx: MigrationContext, cursor: str | None) -> str | None:
            self.pages.append(cursor)
            return await tag.run(ctx, cursor)

        registry = MigrationRegistry("1.1.0")
        registry.register(
            Migration(
                MIGRATION,
                "1.0.0",
                "1.1.0",
                (Step("tag-items", tag_page), Step("mark", self.mark)),
                "fixture items to shape v2",
            )
        )
        return registry

    async def rewrite(self, ctx: MigrationContext, item: dict[str, Any]) -> None:
        if not str(item["PK"]).startswith("fixture#item") or item.get("shape") != "v1":
            return  # not ours, or rewritten already (a resumed page)
        if self.on_first_write is not None:
            hook, self.on_first_write = self.on_first_write, None
            await hook(ctx)
        if self.fail_before_write == sum(self.writes.values()) + 1:
            self.fail_before_write = None
            raise RuntimeError("injected failure")
        await ctx.store.update(
            keys.key(item["PK"], item["SK"]),
            "SET #shape = :new",
            condition="#shape = :old",
            names={"#shape": "shape"},
            values={":new": "v2", ":old": "v1"},
            return_new=False,
        )
        self.writes[item["PK"]] += 1

    async def mark(self, ctx: MigrationContext, cursor: str | None) -> str | None:
        self.marks += 1
        if self.fail_mark:
            self.fail_mark = False
            raise RuntimeError("injected failure in mark")
        await ctx.store.put({**MARK, "done": True})
        return None


@pytest.fixture
async def seeded(repo: Repository) -> Repository:
    for i in range(ITEMS):
        await repo._store.put({**keys.key(f"fixture#item{i:02}", "_"), "shape": "v1"})
    return repo


async def progress_of(repo: Repository) -> Progress:
    found = await read_progress(repo._store, MIGRATION)
    assert found is not None
    return found


async def schema_of(repo: Repository) -> str:
    return str((await repo.get_version_record() or {})["schema_version"])


async def test_an_interrupted_paged_step_resumes_without_redoing_pages(
    seeded: Repository,
) -> None:
    fixture = Fixture(fail_before_write=5)
    registry = fixture.registry()

    with pytest.raises(UpgradeError, match="step 'tag-items' failed: injected failure"):
        await upgrade(seeded, registry=registry)
    saved = await progress_of(seeded)
    first_run = len(fixture.pages)
    assert (saved.status, saved.step, saved.steps_done) == (RUNNING, "tag-items", ())
    assert saved.cursor is not None and saved.pages == first_run - 1  # the failed page is not
    assert sum(fixture.writes.values()) == 4 and fixture.marks == 0
    assert await schema_of(seeded) == "1.0.0"

    result = await upgrade(seeded, registry=registry)
    assert result.applied and result.migrations_run == (MIGRATION,)
    assert fixture.pages[first_run] == saved.cursor  # resumed where it stopped
    assert fixture.pages.count(None) == 1  # the first page was never read again
    assert len(fixture.pages) == len(set(fixture.pages)) + 1  # only the failed page twice
    assert fixture.writes == {f"fixture#item{i:02}": 1 for i in range(ITEMS)}
    assert fixture.marks == 1
    done = await progress_of(seeded)
    assert (done.status, done.steps_done, done.step, done.cursor) == (
        DONE,
        ("tag-items", "mark"),
        None,
        None,
    )
    record = await seeded.get_version_record() or {}
    assert (record["schema_version"], record["updated_by"]) == ("1.1.0", f"cli:{LIBRARY_VERSION}")

    again = await upgrade(seeded, registry=registry)
    assert (again.applied, again.plan.steps) == (False, [])
    assert (len(fixture.pages), sum(fixture.writes.values()), fixture.marks) == (
        len(set(fixture.pages)) + 1,
        ITEMS,
        1,
    )


async def test_a_finished_step_is_not_run_again(seeded: Repository) -> None:
    fixture = Fixture(fail_mark=True)
    registry = fixture.registry()
    with pytest.raises(UpgradeError, match="step 'mark' failed"):
        await upgrade(seeded, registry=registry)
    pages = len(fixture.pages)
    assert (await progress_of(seeded)).steps_done == ("tag-items",)

    await upgrade(seeded, registry=registry)
    assert len(fixture.pages) == pages  # tag-items did not run again
    assert fixture.marks == 2  # the failed call and the successful one
    assert sum(fixture.writes.values()) == ITEMS
    assert await seeded._store.get(MARK) == {**MARK, "done": True}
    assert await schema_of(seeded) == "1.1.0"


async def test_a_concurrent_run_of_the_same_migration_stops_this_one(
    seeded: Repository,
) -> None:
    async def other_upgrade_saves_progress(ctx: MigrationContext) -> None:
        await ctx.store.update(
            keys.migration_progress(MIGRATION),
            "ADD #rev :one",
            names={"#rev": "rev"},
            values={":one": 1},
            return_new=False,
        )

    fixture = Fixture(on_first_write=other_upgrade_saves_progress)
    with pytest.raises(UpgradeError, match="another `zae-limiter upgrade` is running"):
        await upgrade(seeded, registry=fixture.registry())
    assert await schema_of(seeded) == "1.0.0"


async def test_dry_run_lists_the_migration_and_writes_nothing(seeded: Repository) -> None:
    fixture = Fixture()
    result = await upgrade(seeded, registry=fixture.registry(), dry_run=True)
    assert result.plan.steps == [
        f"run migration {MIGRATION} (schema 1.0.0 -> 1.1.0): fixture items to shape v2",
        f"update the version record (schema_version 1.0.0 -> 1.1.0, "
        f"updated_by cli:{LIBRARY_VERSION})",
    ]
    assert not result.applied and fixture.pages == []
    assert await read_progress(seeded._store, MIGRATION) is None
    assert await schema_of(seeded) == "1.0.0"


@pytest.mark.parametrize(
    ("migrations", "error"),
    [
        ([("a", "1.0.0", "1.2.0")], "past this registry's schema 1.1.0"),
        ([("a", "1.0.0", "1.1.0"), ("b", "1.0.5", "1.1.0")], "starts before the previous"),
        ([("a", "1.0.0", "1.0.5"), ("a", "1.0.5", "1.1.0")], "registered already"),
        ([("a", "1.1.0", "1.1.0")], "is not after"),
    ],
)
def test_the_registry_keeps_migrations_ordered(
    migrations: list[tuple[str, str, str]], error: str
) -> None:
    registry = MigrationRegistry("1.1.0")
    step = Step("only", Fixture().mark)
    with pytest.raises(ValueError, match=error):
        for migration_id, start, end in migrations:
            registry.register(Migration(migration_id, start, end, (step,)))


def test_pending_migrations_are_those_after_the_table_schema() -> None:
    step = (Step("only", Fixture().mark),)
    registry = MigrationRegistry("1.3.0")
    first = registry.register(Migration("a", "1.0.0", "1.1.0", step))
    second = registry.register(Migration("b", "1.2.0", "1.3.0", step))
    assert registry.pending("1.0.0") == (first, second)
    assert registry.pending("1.1.0") == registry.pending("1.1.5") == (second,)
    assert registry.pending("1.3.0") == ()
