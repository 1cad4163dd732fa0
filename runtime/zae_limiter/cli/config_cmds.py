"""`system` and `resource`: defaults, flags, cascade policy and capacity (docs/cli.md)."""

from __future__ import annotations

from typing import Any

import click

from ..models import OnUnavailable
from ..repository import Repository
from . import render
from .app import Settings, with_repo
from .options import confirm, limit_options, limits_from, yes_option
from .output import emit, fields, table


@click.group()
def system() -> None:
    """Namespace-wide fallback limits (system defaults)."""


@system.command("set-defaults")
@limit_options
@click.option(
    "--on-unavailable",
    type=click.Choice(["allow", "block"]),
    help="What acquire does when DynamoDB cannot be reached.",
)
@click.pass_obj
def system_set_defaults(
    settings: Settings,
    limit_specs: tuple[str, ...],
    limits_file: str | None,
    soft: tuple[str, ...],
    schedule: tuple[str, ...],
    alert: tuple[str, ...],
    on_unavailable: str | None,
) -> None:
    """Replace the system defaults (the last level every resource falls back to)."""
    limits = limits_from(limit_specs, limits_file, soft, schedule, alert)
    mode = OnUnavailable(on_unavailable) if on_unavailable else None
    with_repo(settings, lambda repo: repo.set_system_defaults(limits, mode, settings.principal))
    emit(
        settings,
        {"limits": [render.limit_dict(lim) for lim in limits], "on_unavailable": on_unavailable},
        f"system defaults set: {len(limits)} limit(s)",
    )


@system.command("get-defaults")
@click.pass_obj
def system_get_defaults(settings: Settings) -> None:
    """Show the system defaults and the stored on_unavailable mode."""
    limits, mode = with_repo(settings, lambda repo: repo.get_system_defaults())
    emit(
        settings,
        {
            "limits": [render.limit_dict(lim) for lim in limits],
            "on_unavailable": mode.value if mode else None,
        },
        f"{render.limits_table(limits)}\non_unavailable: {mode.value if mode else 'inherit'}",
    )


@system.command("delete-defaults")
@yes_option
@click.pass_obj
def system_delete_defaults(settings: Settings, yes: bool) -> None:
    """Delete the system defaults (and the stored on_unavailable mode)."""
    confirm(yes, "Delete the system defaults?")
    with_repo(settings, lambda repo: repo.delete_system_defaults(settings.principal))
    emit(settings, {"deleted": True}, "system defaults deleted")


# --- resource -------------------------------------------------------------------------------------


@click.group()
def resource() -> None:
    """Resource defaults (the free plan), flags, cascade policy, capacity."""


@resource.command("set-defaults")
@click.argument("resource_name", metavar="RESOURCE")
@limit_options
@click.pass_obj
def resource_set_defaults(
    settings: Settings,
    resource_name: str,
    limit_specs: tuple[str, ...],
    limits_file: str | None,
    soft: tuple[str, ...],
    schedule: tuple[str, ...],
    alert: tuple[str, ...],
) -> None:
    """Replace RESOURCE's defaults: the limits of every entity without its own."""
    limits = limits_from(limit_specs, limits_file, soft, schedule, alert)
    with_repo(
        settings, lambda repo: repo.set_resource_defaults(resource_name, limits, settings.principal)
    )
    emit(
        settings,
        {"resource": resource_name, "limits": [render.limit_dict(x) for x in limits]},
        f"resource {resource_name}: defaults set ({len(limits)} limit(s))",
    )


@resource.command("get-defaults")
@click.argument("resource_name", metavar="RESOURCE")
@click.pass_obj
def resource_get_defaults(settings: Settings, resource_name: str) -> None:
    """Show RESOURCE's defaults and its explicit disabled/bypass and cascade values."""

    async def read(repo: Repository) -> tuple[Any, ...]:
        return (
            await repo.get_resource_defaults(resource_name),
            await repo.get_resource_disabled(resource_name),
            await repo.get_resource_cascade(resource_name),
        )

    limits, disabled, cascade = with_repo(settings, read)
    emit(
        settings,
        {
            "resource": resource_name,
            "limits": [render.limit_dict(x) for x in limits],
            "disabled": disabled,
            "cascade": cascade,
        },
        f"{render.limits_table(limits)}\n"
        + fields(
            [("disabled", render.disabled_text(disabled)), ("cascade", render.flag_text(cascade))]
        ),
    )


@resource.command("delete-defaults")
@click.argument("resource_name", metavar="RESOURCE")
@yes_option
@click.pass_obj
def resource_delete_defaults(settings: Settings, resource_name: str, yes: bool) -> None:
    """Delete RESOURCE's defaults; entities fall back to the system defaults."""
    confirm(yes, f"Delete the defaults of resource {resource_name!r}?")
    with_repo(
        settings, lambda repo: repo.delete_resource_defaults(resource_name, settings.principal)
    )
    emit(
        settings,
        {"resource": resource_name, "deleted": True},
        f"resource {resource_name}: defaults deleted",
    )


@resource.command("list")
@click.pass_obj
def resource_list(settings: Settings) -> None:
    """Resources that have defaults."""
    names = with_repo(settings, lambda repo: repo.list_resources_with_defaults())
    emit(settings, {"resources": names}, "\n".join(names) if names else "(none)")


def _resource_flag(name: str, method: str, done: str, summary: str) -> click.Command:
    @click.command(name, help=summary)
    @click.argument("resource_name", metavar="RESOURCE")
    @click.pass_obj
    def command(settings: Settings, resource_name: str) -> None:
        updated = with_repo(
            settings, lambda repo: getattr(repo, method)(resource_name, settings.principal)
        )
        emit(
            settings,
            {"resource": resource_name, "state": done, "items_updated": updated},
            f"resource {resource_name}: {done} ({updated} item(s) updated)",
        )

    return command


for _name, _method, _done, _summary in (
    (
        "disable",
        "disable_resource",
        "disabled",
        "Refuse RESOURCE for everyone (ResourceDisabled) unless an entity is enabled explicitly.",
    ),
    ("enable", "enable_resource", "enabled", "Store an explicit 'enabled' for RESOURCE."),
    (
        "clear-disabled",
        "clear_resource_disabled",
        "inherit",
        "Back to inherit: lifts disable, enable and bypass alike.",
    ),
    (
        "bypass",
        "bypass_resource",
        "bypass",
        "Admit everyone on RESOURCE without debiting balances (usage is still counted).",
    ),
):
    resource.add_command(_resource_flag(_name, _method, _done, _summary))


@resource.command("set-cascade")
@click.argument("resource_name", metavar="RESOURCE")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.pass_obj
def resource_set_cascade(settings: Settings, resource_name: str, state: str) -> None:
    """Cascade policy: with it on, children also debit their parent on RESOURCE."""
    updated = with_repo(
        settings,
        lambda repo: repo.set_resource_cascade(resource_name, state == "on", settings.principal),
    )
    emit(
        settings,
        {"resource": resource_name, "cascade": state == "on", "items_updated": updated},
        f"resource {resource_name}: cascade {state}",
    )


@resource.command("clear-cascade")
@click.argument("resource_name", metavar="RESOURCE")
@click.pass_obj
def resource_clear_cascade(settings: Settings, resource_name: str) -> None:
    """Remove RESOURCE's cascade policy (each entity's own setting decides)."""
    updated = with_repo(
        settings, lambda repo: repo.clear_resource_cascade(resource_name, settings.principal)
    )
    emit(
        settings,
        {"resource": resource_name, "cascade": None, "items_updated": updated},
        f"resource {resource_name}: cascade policy cleared",
    )


@resource.command("capacity")
@click.argument("resource_name", metavar="RESOURCE")
@click.option(
    "-l", "--limit", "limit_name", required=True, metavar="NAME", help="The limit to sum."
)
@click.option("--parents-only", is_flag=True, help="Only entities without a parent.")
@click.pass_obj
def resource_capacity(
    settings: Settings, resource_name: str, limit_name: str, parents_only: bool
) -> None:
    """Capacity and availability of one limit summed over every entity (reads every bucket)."""
    report = with_repo(
        settings, lambda repo: repo.get_resource_capacity(resource_name, limit_name, parents_only)
    )
    rows = [
        {
            "entity_id": e.entity_id,
            "capacity": e.capacity,
            "available": e.available,
            "utilization_pct": e.utilization_pct,
        }
        for e in report.entities
    ]
    human = fields(
        [
            ("resource", report.resource),
            ("limit", report.limit_name),
            ("total capacity", report.total_capacity),
            ("total available", report.total_available),
            ("utilization %", report.utilization_pct),
        ]
    )
    if rows:
        human += "\n\n" + table(rows, ["entity_id", "capacity", "available", "utilization_pct"])
    emit(settings, report, human)
