"""Data migrations between schema versions: ordered, idempotent and resumable (docs/versions.md).

A `Migration` takes the table's data from `from_version` to `to_version` in named `Step`s, run in
order. A step works in pages: it is called with the cursor it returned last (None the first time)
and returns the next cursor, or None once it is finished. After every page the runner writes the
migration's progress item (`keys.migration_progress(id)`): the steps done, the step in progress,
its cursor and a revision. A run that stops for any reason (a failure, throttling, Ctrl-C)
resumes on the next `zae-limiter upgrade` at the saved cursor: a finished step never runs again,
and a paged step repeats at most the one page it was in when it stopped. So each page must be
idempotent (rewrite an item only if it is not rewritten yet), which `scan_step` makes easy.

The library's own registry, `REGISTRY`, holds the migrations up to `schema.SCHEMA_VERSION`; schema
1.0.0 is the first of this implementation, so it has none yet. Tests build their own registries.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from .. import versioning
from ..core.times import iso_millis
from ..dynamo import codec, keys
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed
from ..errors import ZAELimiterError
from ..schema import PARTITION_KEY, SCHEMA_VERSION
from .errors import UpgradeError

RUNNING = "running"
DONE = "done"

#: Items a `scan_step` page reads (one Scan request, strongly consistent).
DEFAULT_PAGE_SIZE = 100

Report = Callable[[str], None]


@dataclass(frozen=True)
class MigrationContext:
    """What a step works with: the table, the clock (epoch ms) and the progress printer."""

    store: Store
    clock: Callable[[], int]
    report: Report


#: One page of a step: (context, cursor or None) -> the next cursor, or None when finished.
StepFunction = Callable[[MigrationContext, str | None], Awaitable[str | None]]


@dataclass(frozen=True)
class Step:
    name: str
    run: StepFunction


@dataclass(frozen=True)
class Migration:
    """The data changes from one schema version to the next."""

    id: str
    from_version: str
    to_version: str
    steps: tuple[Step, ...]
    description: str = ""

    def __post_init__(self) -> None:
        if versioning.parse(self.to_version) <= versioning.parse(self.from_version):
            raise ValueError(
                f"migration {self.id}: {self.to_version} is not after {self.from_version}"
            )
        names = [step.name for step in self.steps]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"migration {self.id}: give at least one step, each named once")


class MigrationRegistry:
    """The ordered migrations leading up to `schema_version` (the schema this code writes)."""

    def __init__(self, schema_version: str = SCHEMA_VERSION) -> None:
        self.schema_version = schema_version
        self._migrations: list[Migration] = []

    @property
    def migrations(self) -> tuple[Migration, ...]:
        return tuple(self._migrations)

    def register(self, migration: Migration) -> Migration:
        """Append `migration`; migrations must be registered in schema order, not overlapping."""
        if versioning.parse(migration.to_version) > versioning.parse(self.schema_version):
            raise ValueError(
                f"migration {migration.id} leads to {migration.to_version}, past "
                f"this registry's schema {self.schema_version}"
            )
        if self._migrations and versioning.parse(migration.from_version) < versioning.parse(
            self._migrations[-1].to_version
        ):
            raise ValueError(f"migration {migration.id} starts before the previous one ends")
        if any(m.id == migration.id for m in self._migrations):
            raise ValueError(f"migration {migration.id} is registered already")
        self._migrations.append(migration)
        return migration

    def pending(self, table_schema: str) -> tuple[Migration, ...]:
        """The migrations a table at `table_schema` still needs, in order."""
        current = versioning.parse(table_schema)
        return tuple(m for m in self._migrations if versioning.parse(m.to_version) > current)


#: The library's migrations (none yet: 1.0.0 is the first schema of this implementation).
REGISTRY = MigrationRegistry()


# --- progress ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """A migration's progress item, as stored."""

    migration_id: str
    status: str = RUNNING
    steps_done: tuple[str, ...] = ()
    step: str | None = None
    cursor: str | None = None
    pages: int = 0
    rev: int = 0
    started_at: str = ""
    updated_at: str = ""
    updated_by: str = ""

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Progress:
        return cls(
            migration_id=str(item["migration_id"]),
            status=str(item.get("status") or RUNNING),
            steps_done=tuple(str(s) for s in item.get("steps_done") or ()),
            step=item.get("step"),
            cursor=item.get("cursor"),
            pages=int(item.get("pages") or 0),
            rev=int(item.get("rev") or 0),
            started_at=str(item.get("started_at") or ""),
            updated_at=str(item.get("updated_at") or ""),
            updated_by=str(item.get("updated_by") or ""),
        )


async def read_progress(store: Store, migration_id: str) -> Progress | None:
    item = await store.get(keys.migration_progress(migration_id))
    return None if item is None else Progress.from_item(item)


class _ProgressWriter:
    """Writes a migration's progress item; each write is conditioned on the revision it read,
    so two upgrades running the same migration cannot both proceed."""

    def __init__(
        self,
        ctx: MigrationContext,
        migration: Migration,
        progress: Progress | None,
        updated_by: str,
    ) -> None:
        self.ctx = ctx
        self.migration = migration
        self.updated_by = updated_by
        self.stored = progress is not None
        now = iso_millis(ctx.clock())
        self.progress = progress or Progress(migration.id, started_at=now, updated_at=now)

    async def save(self, **changes: Any) -> None:
        previous = self.progress
        updated = replace(
            previous,
            rev=previous.rev + 1,
            updated_at=iso_millis(self.ctx.clock()),
            updated_by=self.updated_by,
            **changes,
        )
        item: dict[str, Any] = {
            **keys.migration_progress(self.migration.id),
            "migration_id": self.migration.id,
            "from_version": self.migration.from_version,
            "to_version": self.migration.to_version,
            "status": updated.status,
            "steps_done": list(updated.steps_done),
            "step": updated.step,
            "cursor": updated.cursor,
            "pages": updated.pages,
            "rev": updated.rev,
            "started_at": updated.started_at,
            "updated_at": updated.updated_at,
            "updated_by": updated.updated_by,
        }
        if self.stored:
            condition, values = "#rev = :rev", {":rev": previous.rev}
            names = {"#rev": "rev"}
        else:
            condition, values, names = "attribute_not_exists(#pk)", {}, {"#pk": PARTITION_KEY}
        try:
            await self.ctx.store.put(item, condition=condition, names=names, values=values or None)
        except ConditionFailed:
            raise UpgradeError(
                f"migration {self.migration.id}: its progress changed while this upgrade ran it "
                "(another `zae-limiter upgrade` is running?); nothing more was done. Wait for "
                "the other one to finish, then run `zae-limiter upgrade` again."
            ) from None
        self.stored = True
        self.progress = updated


async def run_migration(ctx: MigrationContext, migration: Migration, *, updated_by: str) -> int:
    """Run (or resume) `migration` to its end. Returns the number of pages run now."""
    progress = await read_progress(ctx.store, migration.id)
    if progress is not None and progress.status == DONE:
        ctx.report(f"migration {migration.id}: done already")
        return 0
    writer = _ProgressWriter(ctx, migration, progress, updated_by)
    if progress is None:
        await writer.save()
        ctx.report(
            f"migration {migration.id} ({migration.from_version} -> "
            f"{migration.to_version}): started"
        )
    else:
        ctx.report(
            f"migration {migration.id}: resuming after {progress.pages} pages "
            f"(steps done: {', '.join(progress.steps_done) or 'none'})"
        )
    pages = 0
    for step in migration.steps:
        if step.name in writer.progress.steps_done:
            continue
        cursor = writer.progress.cursor if writer.progress.step == step.name else None
        while True:
            try:
                following = await step.run(ctx, cursor)
            except ZAELimiterError:
                raise
            except Exception as exc:
                raise UpgradeError(
                    f"migration {migration.id}, step {step.name!r} failed: {exc}. The finished "
                    "pages are recorded; run `zae-limiter upgrade` again to resume."
                ) from exc
            pages += 1
            if following is None:
                await writer.save(
                    steps_done=(*writer.progress.steps_done, step.name),
                    step=None,
                    cursor=None,
                    pages=writer.progress.pages + 1,
                )
                ctx.report(f"migration {migration.id}: step {step.name} done")
                break
            if following == cursor:
                raise UpgradeError(
                    f"migration {migration.id}, step {step.name!r} returned the "
                    "cursor it was given: it would never finish"
                )
            await writer.save(step=step.name, cursor=following, pages=writer.progress.pages + 1)
            cursor = following
    await writer.save(status=DONE)
    ctx.report(f"migration {migration.id}: done")
    return pages


# --- paged scans ------------------------------------------------------------------------------


ItemRewrite = Callable[[MigrationContext, dict[str, Any]], Awaitable[None]]


def scan_step(name: str, rewrite: ItemRewrite, *, page_size: int = DEFAULT_PAGE_SIZE) -> Step:
    """A step that calls `rewrite(ctx, item)` for every item of the table, one Scan page at a time.

    `rewrite` must be idempotent (check the item, and condition its write on what it checked):
    after an interruption the page it was in is read and rewritten again.
    """

    async def page(ctx: MigrationContext, cursor: str | None) -> str | None:
        request: dict[str, Any] = {
            "TableName": ctx.store.table,
            "Limit": page_size,
            "ConsistentRead": True,
        }
        if cursor is not None:
            request["ExclusiveStartKey"] = json.loads(cursor)
        response = await ctx.store.transport.call("Scan", request)
        for wire in response.get("Items", []):
            item = codec.decode_item(wire)
            if item is not None:
                await rewrite(ctx, item)
        last = response.get("LastEvaluatedKey")
        return json.dumps(last, sort_keys=True) if last else None

    return Step(name, page)
