"""`upgrade` (docs/versions.md): a thin shell over `zae_limiter.upgrade.upgrade`.

It connects without the version check it exists to fix, and needs no namespace. The steps and
progress go to stderr; the outcome to stdout (`-o json` for scripts).
"""

from __future__ import annotations

from typing import Any

import click

from ..upgrade import UpgradePlan, UpgradeResult
from ..upgrade import upgrade as run_upgrade
from .app import Settings, run
from .options import confirm, yes_option
from .output import emit, fields, note


def _summary(result: UpgradeResult, dry_run: bool) -> tuple[dict[str, Any], str]:
    plan, record = result.plan, result.record
    steps = plan.steps
    data = {
        "table": plan.table,
        "library": plan.library_version,
        "dry_run": dry_run,
        "applied": result.applied,
        "steps": steps,
        "migrations_run": list(result.migrations_run),
        "code_pushed": result.code_pushed,
        "code_sha256": result.code_sha256,
        "schema_version": record.get("schema_version"),
        "aggregator_version": record.get("aggregator_version"),
        "client_min_version": record.get("client_min_version"),
    }
    if not steps:
        return data, f"table {plan.table} is up to date with zae-limiter {plan.library_version}"
    if not result.applied:
        return data, "\n".join(
            [
                "dry run, nothing written; upgrade would:",
                *(f"  {n}. {s}" for n, s in enumerate(steps, 1)),
            ]
        )
    return data, fields(
        [
            ("table", plan.table),
            ("schema", record.get("schema_version")),
            ("aggregator", record.get("aggregator_version") or "none recorded"),
            ("minimum client", record.get("client_min_version")),
            ("migrations run", list(result.migrations_run)),
            ("aggregator code", "replaced" if result.code_pushed else "unchanged"),
        ]
    )


@click.command("upgrade")
@click.option("--dry-run", is_flag=True, help="Print the steps; write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Re-push the aggregator's code even when its version already matches.",
)
@yes_option
@click.option(
    "--lambda-endpoint-url",
    envvar="ZAEL_LAMBDA_ENDPOINT_URL",
    show_envvar=True,
    help="Lambda endpoint for the aggregator function [default: the SDK's].",
)
@click.pass_obj
def upgrade(
    settings: Settings, dry_run: bool, force: bool, yes: bool, lambda_endpoint_url: str | None
) -> None:
    """Bring the stack forward to this library: data migrations, the aggregator's code (built
    from the installed package), then the version record.

    Never downgrades anything; a no-op when everything already matches. Resumes an interrupted
    upgrade. Needs the 'admin' managed policy (table items and the aggregator's code).
    """

    def ask(plan: UpgradePlan) -> bool:
        confirm(yes, f"Apply these {len(plan.steps)} steps to table {plan.table!r}?")
        return True

    result = run(
        run_upgrade(
            table=settings.table,
            region=settings.region,
            endpoint_url=settings.endpoint_url,
            lambda_endpoint_url=lambda_endpoint_url,
            dry_run=dry_run,
            force=force,
            confirm=ask,
            report=note,
        )
    )
    data, human = _summary(result, dry_run)
    emit(settings, data, human)
