"""`limits`: the manifest commands (docs/manifest.md)."""

from __future__ import annotations

import time

import click

from ..manifest import (
    Change,
    Manifest,
    ManifestError,
    Plan,
    apply_plan,
    export_manifest,
    load_file,
    plan_manifest,
    to_yaml,
)
from ..manifest.table_checks import located
from ..repository import Repository
from .app import EXIT_DRIFT, Settings, connect, run, with_repo
from .options import confirm
from .output import emit, note
from .render import change_text, plan_lines

FILE_OPTION = click.option(
    "-f",
    "--file",
    "path",
    required=True,
    type=click.Path(dir_okay=False),
    help="The manifest (YAML).",
)
QUIET_OPTION = click.option("-q", "--quiet", is_flag=True, help="Only the summary and warnings.")


@click.group()
def limits() -> None:
    """Declarative limits: validate, plan, diff, apply and export a manifest."""


def _load(settings: Settings, path: str) -> Manifest:
    manifest = load_file(path)
    if settings.namespace is not None and settings.namespace != manifest.namespace:
        error = ManifestError(
            "namespace",
            f"the manifest is for namespace {manifest.namespace!r} but "
            f"-N/--namespace (or $ZAEL_NAMESPACE) says {settings.namespace!r}",
        )
        raise ManifestError.several(located(manifest, [error]))
    return manifest


def _plan(settings: Settings, manifest: Manifest, *, full: bool = False) -> Plan:
    return with_repo(
        settings,
        lambda repo: plan_manifest(repo, manifest, full=full),
        namespace=manifest.namespace,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _warn(plan_or_warnings: Plan | tuple[str, ...]) -> None:
    warnings = plan_or_warnings.warnings if isinstance(plan_or_warnings, Plan) else plan_or_warnings
    for warning in warnings:
        note(f"warning: {warning}")


@limits.command("validate")
@FILE_OPTION
@click.pass_obj
def limits_validate(settings: Settings, path: str) -> None:
    """Parse and check a manifest offline (no table needed)."""
    manifest = _load(settings, path)
    levels = sum(len(spec.levels) for spec in manifest.entities.values())
    data = {
        "valid": True,
        "namespace": manifest.namespace,
        "system": manifest.system is not None,
        "resources": len(manifest.resources),
        "entities": len(manifest.entities),
        "entity_levels": levels,
    }
    emit(
        settings,
        data,
        f"{path}: valid (namespace {manifest.namespace}: "
        f"{'system defaults, ' if manifest.system else ''}"
        f"{len(manifest.resources)} resource(s), {len(manifest.entities)} "
        f"entity(ies) with {levels} level(s))",
    )


@limits.command("plan")
@FILE_OPTION
@QUIET_OPTION
@click.pass_obj
def limits_plan(settings: Settings, path: str, quiet: bool) -> None:
    """Show what `apply` would change. Read-only."""
    plan = _plan(settings, _load(settings, path))
    emit(settings, plan.as_dict(), "\n".join(plan_lines(plan, quiet=quiet, now_ms=_now_ms())))
    _warn(plan)


@limits.command("diff")
@FILE_OPTION
@QUIET_OPTION
@click.pass_context
def limits_diff(ctx: click.Context, path: str, quiet: bool) -> None:
    """Report drift between the manifest and the table; exit 3 when there is any."""
    settings: Settings = ctx.obj
    plan = _plan(settings, _load(settings, path))
    emit(
        settings,
        {**plan.as_dict(), "drift": plan.has_changes},
        "\n".join(plan_lines(plan, drift=True, quiet=quiet, now_ms=_now_ms())),
    )
    _warn(plan)
    if plan.has_changes:
        ctx.exit(EXIT_DRIFT)


@limits.command("apply")
@FILE_OPTION
@QUIET_OPTION
@click.option(
    "--full",
    is_flag=True,
    help="Rewrite every declared level, changed or not (repair: live buckets are "
    "restamped; a level already holding the same values records no audit event).",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_obj
def limits_apply(settings: Settings, path: str, quiet: bool, full: bool, yes: bool) -> None:
    """Apply the manifest to the table: only what differs; resumes an interrupted apply."""
    manifest = _load(settings, path)

    def progress(index: int, total: int, change: Change) -> None:
        if not quiet:
            note(f"[{index + 1}/{total}] {change_text(change)}")

    async def body() -> None:
        async with connect(settings, namespace=manifest.namespace) as repo:
            plan = await plan_manifest(repo, manifest, full=full)
            if not settings.json:
                click.echo("\n".join(plan_lines(plan, quiet=quiet, now_ms=repo.scope.clock())))
            _warn(plan)
            if plan.has_changes:
                confirm(yes, f"Apply these changes to namespace {manifest.namespace!r}?")
            result = await apply_plan(
                repo, manifest, plan, principal=settings.principal, on_progress=progress
            )
            counts = result.as_dict()["counts"]
            emit(
                settings,
                result.as_dict(),
                (f"resumed {len(result.resumed)} owed change(s); " if result.resumed else "")
                + f"applied: {counts['create']} created, {counts['update']} updated, "
                f"{counts['delete']} deleted; {result.unchanged} unchanged",
            )

    run(body())


@limits.command("export")
@click.option(
    "--entities/--no-entities",
    default=True,
    show_default=True,
    help="Include entities with limits of their own.",
)
@click.pass_obj
def limits_export(settings: Settings, entities: bool) -> None:
    """Print the namespace's stored config as a manifest."""

    async def export(repo: Repository) -> dict[str, object]:
        return await export_manifest(repo, entities=entities)

    document = with_repo(settings, export)
    emit(settings, document, to_yaml(document).rstrip("\n"))
