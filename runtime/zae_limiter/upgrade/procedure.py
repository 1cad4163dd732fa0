"""`zae-limiter upgrade` (docs/versions.md): bring a stack forward to the installed library.

1. Read the version record (without the check on open this exists to fix) and plan: refuse if
   the library is older than anything recorded (schema, aggregator, minimum client version),
   since upgrade never downgrades.
2. Run the pending data migrations, in order, each resumable (`migrations`); the record's
   `schema_version` follows each finished migration.
3. Replace the aggregator function's code with the zip built from the installed library
   (`bundle`) and wait until Lambda reports the update successful and the function active.
4. Update the version record: `schema_version`, `aggregator_version`, `updated_at`, `updated_by`
   (`cli:<version>`); `client_min_version` is never touched.

Nothing is written when everything already matches (unless `force`, which re-pushes the code),
or with `dry_run`. Every record write is conditioned on the versions read, so a concurrent
upgrade or deploy makes this one stop instead of overwriting it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .. import versioning
from ..connection import read_version_record, system_clock
from ..core.times import iso_millis
from ..dynamo import keys
from ..dynamo.store import Store
from ..dynamo.transport import ConditionFailed, Transport
from ..errors import IncompatibleSchemaError, VersionMismatchError, ZAELimiterError
from ..repository import Repository
from ..schema import DEFAULT_TABLE_NAME, PARTITION_KEY, SORT_KEY
from .bundle import LAMBDA_HANDLER, AggregatorBundle, build_aggregator_bundle
from .errors import UpgradeError
from .functions import DEFAULT_MAX_POLLS, DEFAULT_POLL_INTERVAL_S, FunctionCode
from .migrations import REGISTRY, Migration, MigrationContext, MigrationRegistry, run_migration

log = logging.getLogger("zae_limiter.upgrade")

Report = Callable[[str], None]


@dataclass(frozen=True)
class UpgradePlan:
    """What `upgrade` would do to a table, worked out from its version record alone."""

    table: str
    record: Mapping[str, Any]
    library_version: str
    schema_from: str
    schema_to: str
    migrations: tuple[Migration, ...]
    aggregator_function: str | None
    aggregator_from: str | None
    push_code: bool
    force: bool
    #: Why upgrade must not run (raised by `upgrade`); None when it may.
    refusal: ZAELimiterError | None = field(default=None, compare=False)

    @property
    def aggregator_to(self) -> str | None:
        return self.library_version if self.push_code else self.aggregator_from

    @property
    def writes_record(self) -> bool:
        return bool(self.migrations) or self.schema_to != self.schema_from or self.push_code

    @property
    def steps(self) -> list[str]:
        """The steps, in order, one line each; empty when upgrade would change nothing."""
        if self.refusal is not None:
            return []
        lines = [
            f"run migration {m.id} (schema {m.from_version} -> {m.to_version})"
            + (f": {m.description}" if m.description else "")
            for m in self.migrations
        ]
        if self.push_code:
            if self.aggregator_from == self.library_version:
                lines.append(
                    f"re-push the aggregator code {self.library_version} to "
                    f"{self.aggregator_function} (--force)"
                )
            else:
                lines.append(
                    f"replace the code of aggregator function "
                    f"{self.aggregator_function} "
                    f"({self.aggregator_from or 'unknown version'} -> "
                    f"{self.library_version}) and wait until it is active"
                )
        if self.writes_record:
            changes = [
                f"{name} {before} -> {after}"
                for name, before, after in (
                    ("schema_version", self.schema_from, self.schema_to),
                    ("aggregator_version", self.aggregator_from, self.aggregator_to),
                )
                if before != after
            ]
            lines.append(
                "update the version record ("
                + ", ".join([*changes, f"updated_by cli:{self.library_version}"])
                + ")"
            )
        return lines


def plan_upgrade(
    record: Mapping[str, Any],
    *,
    table: str = "",
    force: bool = False,
    registry: MigrationRegistry = REGISTRY,
    library_version: str = versioning.LIBRARY_VERSION,
) -> UpgradePlan:
    """Plan an upgrade of the table whose version record is `record`. Pure: no I/O.

    `plan.steps` says what would change (empty: nothing), `plan.refusal` why it must not run.
    """
    schema_from = str(record.get("schema_version") or "0")
    target = registry.schema_version
    aggregator = record.get("aggregator_version")
    aggregator_from = None if aggregator is None else str(aggregator)
    function = record.get("aggregator_function") or None
    verdict = versioning.assess(record, library_version, target, force=force, table=table)
    refusal = _refusal(verdict, record, library_version)
    return UpgradePlan(
        table=table,
        record=dict(record),
        library_version=library_version,
        schema_from=schema_from,
        schema_to=target if verdict.migrate_schema else schema_from,
        migrations=registry.pending(schema_from) if verdict.migrate_schema else (),
        aggregator_function=None if function is None else str(function),
        aggregator_from=aggregator_from,
        push_code=verdict.push_code,
        force=force,
        refusal=refusal,
    )


def _refusal(
    verdict: versioning.Verdict, record: Mapping[str, Any], library: str
) -> ZAELimiterError | None:
    """The verdict's refusal as the error `upgrade` raises (None: it may run)."""
    if not verdict.refusal:
        return None
    schema_version = str(record.get("schema_version") or "0")
    aggregator = record.get("aggregator_version")
    if verdict.refusal_kind == "schema_major":
        return IncompatibleSchemaError(library, schema_version, verdict.refusal)
    if verdict.refusal_kind == "aggregator_unmanaged":
        return UpgradeError(verdict.refusal)
    return VersionMismatchError(
        library, schema_version, None if aggregator is None else str(aggregator), verdict.refusal
    )


# --- running it ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpgradeResult:
    plan: UpgradePlan
    _: KW_ONLY
    #: False for a dry run, a no-op, or when `confirm` declined.
    applied: bool
    migrations_run: tuple[str, ...] = ()
    code_pushed: bool = False
    #: Base64 SHA-256 of the aggregator zip built (None when no code was needed).
    code_sha256: str | None = None
    #: The version record afterwards.
    record: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Target:
    store: Store
    region: str
    clock: Callable[[], int]


@asynccontextmanager
async def _connect(
    repo: Repository | None, table: str | None, region: str | None, endpoint_url: str | None
) -> AsyncIterator[_Target]:
    """The repository's table, or a connection of our own (no namespace needed)."""
    if repo is not None:
        yield _Target(repo.scope.store, repo.region, repo.scope.clock)
        return
    transport = await Transport.connect(
        region=region, endpoint_url=endpoint_url or os.environ.get("ZAEL_ENDPOINT_URL") or None
    )
    try:
        name = table or os.environ.get("ZAEL_TABLE") or DEFAULT_TABLE_NAME
        yield _Target(Store(transport, name), transport.region, system_clock)
    finally:
        await transport.close()


async def upgrade(
    repo: Repository | None = None,
    *,
    table: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    lambda_endpoint_url: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    registry: MigrationRegistry = REGISTRY,
    bundle: AggregatorBundle | None = None,
    confirm: Callable[[UpgradePlan], bool] | None = None,
    report: Report | None = None,
    poll_interval: float = DEFAULT_POLL_INTERVAL_S,
    max_polls: int = DEFAULT_MAX_POLLS,
) -> UpgradeResult:
    """Upgrade the table of `repo` (or `table`/`region`/`endpoint_url`) to this library.

    `report` is told the steps and their progress; the verdict (up to date, upgraded) is the
    result's, and is logged.

    Raises VersionMismatchError / IncompatibleSchemaError (refused: nothing written),
    InfrastructureNotFoundError (no table or version record) or UpgradeError (stopped part-way:
    what finished stays finished, and running it again resumes). `bundle` defaults to the zip
    built from the installed library; `confirm(plan)` is asked before the first write.
    """
    say = report or log.info
    async with _connect(repo, table, region, endpoint_url) as target:
        record = await read_version_record(target.store)
        plan = plan_upgrade(record, table=target.store.table, force=force, registry=registry)
        if plan.refusal is not None:
            raise plan.refusal
        code = None
        if plan.push_code:
            code = bundle or build_aggregator_bundle()
        if not plan.steps:  # the verdict is the result's (the CLI prints it once)
            log.info("table %s is up to date with zae-limiter %s", plan.table, plan.library_version)
            return UpgradeResult(plan, applied=False, record=record)
        sha = None if code is None else code.sha256
        if dry_run:
            return UpgradeResult(plan, applied=False, code_sha256=sha, record=record)
        say(f"upgrading table {plan.table} to zae-limiter {plan.library_version}:")
        for number, step in enumerate(plan.steps, 1):
            say(f"  {number}. {step}")
        if code is not None:
            say(
                f"  aggregator zip: {code.size} bytes, {len(code.files)} files, "
                f"sha256 {code.sha256}"
            )
        if confirm is not None and not confirm(plan):
            return UpgradeResult(plan, applied=False, code_sha256=sha, record=record)

        by = f"cli:{plan.library_version}"
        context = MigrationContext(target.store, target.clock, say)
        for migration in plan.migrations:
            await run_migration(context, migration, updated_by=by)
            record = await _write_record(
                target,
                record,
                schema_version=migration.to_version,
                aggregator_version=record.get("aggregator_version"),
                updated_by=by,
            )
        pushed = False
        if code is not None and plan.aggregator_function is not None:
            async with FunctionCode.connect(
                region=target.region,
                endpoint_url=lambda_endpoint_url,
                poll_interval=poll_interval,
                max_polls=max_polls,
            ) as functions:
                pushed = await _push(functions, plan.aggregator_function, code, force, say)
        record = await _write_record(
            target,
            record,
            schema_version=plan.schema_to,
            aggregator_version=plan.aggregator_to,
            updated_by=by,
        )
        log.info(
            "table %s upgraded: schema %s, aggregator %s",
            plan.table,
            record.get("schema_version"),
            record.get("aggregator_version"),
        )
        if repo is not None:
            repo.scope.shared.version_record = dict(record)
        return UpgradeResult(
            plan,
            applied=True,
            migrations_run=tuple(m.id for m in plan.migrations),
            code_pushed=pushed,
            code_sha256=sha,
            record=record,
        )


async def _push(
    functions: FunctionCode, function: str, code: AggregatorBundle, force: bool, say: Report
) -> bool:
    """Replace the function's code unless it already is this zip (or `force`). Pushed or not."""
    details = await functions.wait_until_ready(function, after_update=False)
    handler = details.get("Handler")
    if handler != LAMBDA_HANDLER:
        raise UpgradeError(
            f"{function} runs handler {handler!r}, not {LAMBDA_HANDLER!r}: it is not an "
            "aggregator deployed by the zae-limiter construct, so its code was left alone"
        )
    if details.get("CodeSha256") == code.sha256 and not force:
        say(f"{function} already runs this code")
        return False
    say(f"replacing the code of {function}")
    await functions.replace_code(function, code.zip_bytes)
    details = await functions.wait_until_ready(function, after_update=True)
    if details.get("CodeSha256") != code.sha256:
        raise UpgradeError(
            f"{function} reports code {details.get('CodeSha256')} instead of {code.sha256}: "
            "something else deployed it meanwhile; run `zae-limiter upgrade` again"
        )
    say(f"{function} is active with the new code")
    return True


async def _write_record(
    target: _Target,
    current: Mapping[str, Any],
    *,
    schema_version: str,
    aggregator_version: Any,
    updated_by: str,
) -> dict[str, Any]:
    """SET the versions, conditioned on the values read; `client_min_version` is kept as is."""
    names = {
        "#pk": PARTITION_KEY,
        "#schema": "schema_version",
        "#agg": "aggregator_version",
        "#at": "updated_at",
        "#by": "updated_by",
    }
    values: dict[str, Any] = {
        ":schema": schema_version,
        ":agg": aggregator_version,
        ":at": iso_millis(target.clock()),
        ":by": updated_by,
    }
    checks = ["attribute_exists(#pk)"]
    for placeholder, attribute in (("#schema", "schema_version"), ("#agg", "aggregator_version")):
        old = current.get(attribute)
        if old is None:
            checks.append(
                f"(attribute_not_exists({placeholder}) OR attribute_type({placeholder}, :null))"
            )
            values[":null"] = "NULL"
        else:
            checks.append(f"{placeholder} = :old{placeholder[1:]}")
            values[f":old{placeholder[1:]}"] = old
    try:
        item = await target.store.update(
            keys.version_record(),
            "SET #schema = :schema, #agg = :agg, #at = :at, #by = :by",
            condition=" AND ".join(checks),
            names=names,
            values=values,
        )
    except ConditionFailed:
        raise UpgradeError(
            "the version record changed while upgrading (another upgrade or a `cdk deploy`?); "
            "what finished stays finished: run `zae-limiter upgrade` again"
        ) from None
    return {k: v for k, v in (item or {}).items() if k not in (PARTITION_KEY, SORT_KEY)}
