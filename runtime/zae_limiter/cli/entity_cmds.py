"""`entity`: records, parents, per-entity limits and flags (the bucket commands, availability,
resets, top-ups and pre-splits, are in `bucket_cmds`)."""

from __future__ import annotations

from typing import Any

import click

from ..admin.changes import entity_known
from ..errors import EntityNotFoundError
from ..repository import Repository
from ..validation import DEFAULT_RESOURCE
from . import render
from .app import Settings, with_repo
from .options import (
    confirm,
    limit_options,
    limits_from,
    resource_option,
    yes_option,
)
from .output import emit, fields, note

ENTITY_ARG = click.argument("entity_id", metavar="ENTITY_ID")
LEVEL_HELP = "Resource, or _default_ for every resource."
FLAG_RESOURCE_HELP = "Resource (omit for all resources)."


@click.group()
def entity() -> None:
    """Entities (users, API keys, organisations): records, limits, flags, balances."""


@entity.command("create")
@ENTITY_ARG
@click.option("--display-name", help="A human-readable name.")
@click.option("--parent", "parent_id", metavar="ID", help="The organisation (must be a root).")
@click.option(
    "--cascade/--no-cascade", default=False, help="Entity-wide fallback: debit the parent too."
)
@click.option("--meta", multiple=True, metavar="KEY=VALUE", help="Metadata (repeatable).")
@click.pass_obj
def entity_create(
    settings: Settings,
    entity_id: str,
    display_name: str | None,
    parent_id: str | None,
    cascade: bool,
    meta: tuple[str, ...],
) -> None:
    """Create the entity's record."""
    metadata: dict[str, str] = {}
    for pair in meta:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: write KEY=VALUE", param_hint="--meta")
        metadata[key] = value
    created = with_repo(
        settings,
        lambda repo: repo.create_entity(
            entity_id, display_name, parent_id, cascade, metadata, settings.principal
        ),
    )
    emit(
        settings,
        render.entity_dict(created),
        f"entity {entity_id} created" + (f" under {parent_id}" if parent_id else ""),
    )


@entity.command("show")
@ENTITY_ARG
@click.pass_obj
def entity_show(settings: Settings, entity_id: str) -> None:
    """The record, children count, config levels and flags."""

    async def read(repo: Repository) -> tuple[Any, ...]:
        record = await repo.get_entity(entity_id)
        children = await repo.get_children(entity_id)
        config = await repo.scope.resolver.entity_config(entity_id)
        return record, children, config

    record, children, config = with_repo(settings, read)
    levels = {
        resource: {
            "limits": [render.limit_dict(x) for x in level.limits or ()],
            "disabled": level.disabled,
            "cascade": level.cascade,
        }
        for resource, level in sorted(config.levels.items())
        if level.limits is not None or level.disabled is not None or level.cascade is not None
    }
    if record is None and not levels:
        raise EntityNotFoundError(entity_id)
    data = {
        "entity": None if record is None else render.entity_dict(record),
        "children": len(children),
        "levels": levels,
    }
    lines = [
        fields(
            [
                ("id", entity_id),
                ("name", record.name if record else None),
                ("parent", record.parent_id if record else None),
                ("cascade", record.cascade if record else None),
                ("metadata", dict(record.metadata) if record else None),
                ("created", record.created_at if record else "(no record)"),
                ("children", len(children)),
            ]
        )
    ]
    for resource, level in sorted(config.levels.items()):
        if resource not in levels:
            continue
        title = "all resources (_default_)" if resource == DEFAULT_RESOURCE else resource
        lines.append(
            f"\n[{title}] disabled: {render.disabled_text(level.disabled)}, "
            f"cascade: {render.flag_text(level.cascade)}"
        )
        if level.limits is not None:
            lines.append(render.limits_table(list(level.limits)))
    emit(settings, data, "\n".join(lines))


@entity.command("delete")
@ENTITY_ARG
@yes_option
@click.pass_obj
def entity_delete(settings: Settings, entity_id: str, yes: bool) -> None:
    """Delete the entity: record, config levels, buckets and usage snapshots."""
    confirm(yes, f"Delete entity {entity_id!r} with its config, buckets and usage?")

    async def delete(repo: Repository) -> None:
        config = await repo.scope.resolver.entity_config(entity_id)
        if not config.levels and not await entity_known(repo.scope, entity_id):
            raise click.ClickException(
                f"no entity {entity_id!r} in namespace {repo.namespace_name!r}: nothing to "
                "delete (check the id with `entity show`)"
            )
        await repo.delete_entity(entity_id, settings.principal)

    with_repo(settings, delete)
    emit(settings, {"entity_id": entity_id, "deleted": True}, f"entity {entity_id} deleted")


@entity.command("children")
@click.argument("parent_id", metavar="PARENT_ID")
@click.pass_obj
def entity_children(settings: Settings, parent_id: str) -> None:
    """Direct children of PARENT_ID."""
    children = with_repo(settings, lambda repo: repo.get_children(parent_id))
    emit(
        settings,
        {"parent_id": parent_id, "children": [render.entity_dict(e) for e in children]},
        render.entities_table(children),
    )


@entity.command("list")
@click.option(
    "--with-custom-limits",
    "resource_name",
    required=True,
    metavar="RESOURCE",
    help="Entities with limits of their own for RESOURCE (or _default_).",
)
@click.option("--limit", "count", type=click.IntRange(min=1), help="At most N entities.")
@click.pass_obj
def entity_list(settings: Settings, resource_name: str, count: int | None) -> None:
    """Entities with entity-level limits for a resource."""

    async def read(repo: Repository) -> list[str]:
        found: list[str] = []
        cursor: str | None = None
        while count is None or len(found) < count:
            page, cursor = await repo.list_entities_with_custom_limits(
                resource_name, None if count is None else count - len(found), cursor
            )
            found += page
            if not cursor:
                break
        return found

    ids = with_repo(settings, read)
    emit(settings, {"resource": resource_name, "entities": ids}, "\n".join(ids) or "(none)")


@entity.command("list-resources")
@click.pass_obj
def entity_list_resources(settings: Settings) -> None:
    """Resources that any entity has its own limits for."""
    names = with_repo(settings, lambda repo: repo.list_resources_with_entity_configs())
    emit(settings, {"resources": names}, "\n".join(names) or "(none)")


@entity.command("set-limits")
@ENTITY_ARG
@resource_option(
    required=False,
    help_text="Resource whose limits to set (or --all-resources for the _default_ level).",
)
@click.option(
    "--all-resources",
    is_flag=True,
    help="Set the entity's _default_ limits: they apply to every resource it has no limits "
    "of its own for, budgets included.",
)
@limit_options
@click.pass_obj
def entity_set_limits(
    settings: Settings,
    entity_id: str,
    resource: str | None,
    all_resources: bool,
    limit_specs: tuple[str, ...],
    limits_file: str | None,
    soft: tuple[str, ...],
    schedule: tuple[str, ...],
    alert: tuple[str, ...],
) -> None:
    """Replace the entity's whole list of limits at one level (a paid plan, for example):
    one resource (-r), or every resource (--all-resources)."""
    resource = _level(resource, all_resources)
    limits = limits_from(limit_specs, limits_file, soft, schedule, alert)

    async def write_limits(repo: Repository) -> None:
        await repo.set_limits(entity_id, limits, resource, settings.principal)
        if not await entity_known(repo.scope, entity_id):
            note(
                f"warning: entity {entity_id!r} has no record and no buckets yet; the limits "
                "apply when it first calls (check the id, or `entity create` it)"
            )

    with_repo(settings, write_limits)
    emit(
        settings,
        {
            "entity_id": entity_id,
            "resource": resource,
            "limits": [render.limit_dict(x) for x in limits],
        },
        f"entity {entity_id} / {resource}: {len(limits)} limit(s) set",
    )


@entity.command("get-limits")
@ENTITY_ARG
@resource_option(required=False, default=DEFAULT_RESOURCE, help_text=LEVEL_HELP)
@click.pass_obj
def entity_get_limits(settings: Settings, entity_id: str, resource: str) -> None:
    """The entity's limits at one level only (no inheritance)."""
    limits = with_repo(settings, lambda repo: repo.get_limits(entity_id, resource))
    emit(
        settings,
        {
            "entity_id": entity_id,
            "resource": resource,
            "limits": [render.limit_dict(x) for x in limits],
        },
        render.limits_table(limits),
    )


@entity.command("delete-limits")
@ENTITY_ARG
@resource_option(required=False, default=DEFAULT_RESOURCE, help_text=LEVEL_HELP)
@yes_option
@click.pass_obj
def entity_delete_limits(settings: Settings, entity_id: str, resource: str, yes: bool) -> None:
    """Remove the entity's limits at one level; it falls back to the next level."""
    confirm(yes, f"Delete the limits of {entity_id!r} at {resource!r}?")
    with_repo(settings, lambda repo: repo.delete_limits(entity_id, resource, settings.principal))
    emit(
        settings,
        {"entity_id": entity_id, "resource": resource, "deleted": True},
        f"entity {entity_id} / {resource}: limits deleted",
    )


def _level(resource: str | None, all_resources: bool) -> str:
    """The level `set-limits` writes: exactly one of -r and --all-resources (limits for every
    resource, budgets included, are never set by leaving -r out)."""
    if all_resources and resource is not None:
        raise click.UsageError("give -r/--resource or --all-resources, not both")
    if all_resources:
        return DEFAULT_RESOURCE
    if resource is None:
        raise click.UsageError(
            "give -r/--resource RESOURCE for one resource, or --all-resources to set the "
            "entity's _default_ limits (they apply to every resource it has no limits of its "
            "own for, budgets included)"
        )
    return resource


def _entity_flag(name: str, method: str, done: str, summary: str) -> click.Command:
    @click.command(name, help=summary)
    @ENTITY_ARG
    @resource_option(required=False, help_text=FLAG_RESOURCE_HELP)
    @click.pass_obj
    def command(settings: Settings, entity_id: str, resource: str | None) -> None:
        updated = with_repo(
            settings, lambda repo: getattr(repo, method)(entity_id, resource, settings.principal)
        )
        where = resource or "all resources"
        emit(
            settings,
            {"entity_id": entity_id, "resource": resource, "state": done, "items_updated": updated},
            f"entity {entity_id} / {where}: {done} ({updated} item(s) updated)",
        )

    return command


for _name, _method, _done, _summary in (
    ("disable", "disable_entity", "disabled", "Refuse the entity (ResourceDisabled)."),
    (
        "enable",
        "enable_entity",
        "enabled",
        "Explicit enable: readmits the entity to a disabled resource.",
    ),
    (
        "clear-disabled",
        "clear_entity_disabled",
        "inherit",
        "Back to inherit; also how an entity bypass is lifted.",
    ),
    (
        "bypass",
        "bypass_entity",
        "bypass",
        "Admit the entity without debiting its balances (usage is still counted); its parent is "
        "still judged.",
    ),
):
    entity.add_command(_entity_flag(_name, _method, _done, _summary))


@entity.command("set-cascade")
@ENTITY_ARG
@click.argument("state", type=click.Choice(["on", "off"]))
@resource_option(required=False, help_text=FLAG_RESOURCE_HELP)
@click.pass_obj
def entity_set_cascade(
    settings: Settings, entity_id: str, state: str, resource: str | None
) -> None:
    """Per-entity cascade policy (outranks the resource's)."""
    updated = with_repo(
        settings,
        lambda repo: repo.set_entity_cascade(
            entity_id, state == "on", resource, settings.principal
        ),
    )
    emit(
        settings,
        {
            "entity_id": entity_id,
            "resource": resource,
            "cascade": state == "on",
            "items_updated": updated,
        },
        f"entity {entity_id} / {resource or 'all resources'}: cascade {state}",
    )


@entity.command("clear-cascade")
@ENTITY_ARG
@resource_option(required=False, help_text=FLAG_RESOURCE_HELP)
@click.pass_obj
def entity_clear_cascade(settings: Settings, entity_id: str, resource: str | None) -> None:
    """Remove the entity's cascade policy at one level."""
    updated = with_repo(
        settings, lambda repo: repo.clear_entity_cascade(entity_id, resource, settings.principal)
    )
    emit(
        settings,
        {"entity_id": entity_id, "resource": resource, "cascade": None, "items_updated": updated},
        f"entity {entity_id} / {resource or 'all resources'}: cascade policy cleared",
    )


@entity.command("set-parent")
@ENTITY_ARG
@click.option("--parent", "parent_id", metavar="ID", help="The new parent (a root entity).")
@click.option("--none", "no_parent", is_flag=True, help="Make the entity a root.")
@click.pass_obj
def entity_set_parent(
    settings: Settings, entity_id: str, parent_id: str | None, no_parent: bool
) -> None:
    """Move the entity under another parent (or none); its next call debits the new one."""
    if (parent_id is None) == (not no_parent):
        raise click.UsageError("give exactly one of --parent ID or --none")
    updated = with_repo(
        settings, lambda repo: repo.set_parent(entity_id, parent_id, principal=settings.principal)
    )
    emit(
        settings,
        {"entity_id": entity_id, "parent_id": parent_id, "items_updated": updated},
        f"entity {entity_id}: parent {parent_id or 'none'} ({updated} item(s) updated)",
    )
