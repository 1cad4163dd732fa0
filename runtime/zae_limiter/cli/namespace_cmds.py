"""`namespace`: register, list, show, orphans, delete, recover, purge (docs/cli.md).

These commands manage the table's registry, so they connect through the `default` namespace
whatever `-N` says.
"""

from __future__ import annotations

import time
from typing import Any

import click

from ..errors import NamespaceNotFoundError
from ..repository import Repository
from .app import Settings, with_repo
from .options import confirm, yes_option
from .output import emit, fields, note, table

REGISTRY = "default"
COLUMNS = ["name", "id", "status", "created_at"]


def _registry(settings: Settings, action: Any) -> Any:
    return with_repo(settings, action, namespace=REGISTRY)


@click.group()
def namespace() -> None:
    """Namespaces: isolated sets of config, entities, buckets, usage and audit in one table."""


@namespace.command("register")
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@click.pass_obj
def namespace_register(settings: Settings, names: tuple[str, ...]) -> None:
    """Register namespaces (idempotent)."""
    ids = _registry(
        settings, lambda repo: repo.register_namespaces(list(names), settings.principal)
    )
    emit(
        settings,
        {"namespaces": ids},
        table([{"name": n, "id": i} for n, i in ids.items()], ["name", "id"]),
    )


@namespace.command("list")
@click.pass_obj
def namespace_list(settings: Settings) -> None:
    """Active namespaces."""
    rows = _registry(settings, lambda repo: repo.list_namespaces())
    emit(settings, {"namespaces": rows}, table(rows, COLUMNS))


@namespace.command("show")
@click.argument("name")
@click.pass_obj
def namespace_show(settings: Settings, name: str) -> None:
    """One namespace: id, status, creation time."""
    info = _registry(settings, lambda repo: repo.get_namespace(name))
    if info is None:
        raise NamespaceNotFoundError(name)
    emit(settings, info, fields([(k, info.get(k)) for k in COLUMNS]))


@namespace.command("orphans")
@click.pass_obj
def namespace_orphans(settings: Settings) -> None:
    """Soft-deleted namespaces (recoverable until purged)."""
    rows = _registry(settings, lambda repo: repo.list_orphan_namespaces())
    emit(settings, {"namespaces": rows}, table(rows, COLUMNS) if rows else "(none)")


@namespace.command("delete")
@click.argument("name")
@yes_option
@click.pass_obj
def namespace_delete(settings: Settings, name: str, yes: bool) -> None:
    """Soft delete: the name stops resolving at once; the data stays until purged."""
    confirm(yes, f"Delete namespace {name!r}? (recoverable with `namespace recover` until purged)")

    async def delete(repo: Repository) -> dict[str, Any] | None:
        info = await repo.get_namespace(name)
        await repo.delete_namespace(name, settings.principal)
        return info

    info = _registry(settings, delete)
    ns_id = info["id"] if info else None
    emit(
        settings,
        {"name": name, "id": ns_id, "status": "deleted"},
        f"namespace {name} deleted (id {ns_id}; `zae-limiter namespace recover {ns_id}` undoes it)",
    )


@namespace.command("recover")
@click.argument("namespace_id")
@click.pass_obj
def namespace_recover(settings: Settings, namespace_id: str) -> None:
    """Undo a soft delete."""
    name = _registry(
        settings, lambda repo: repo.recover_namespace(namespace_id, settings.principal)
    )
    emit(
        settings,
        {"name": name, "id": namespace_id, "status": "active"},
        f"namespace {name} recovered",
    )


@namespace.command("purge")
@click.argument("namespace_id")
@yes_option
@click.pass_obj
def namespace_purge(settings: Settings, namespace_id: str, yes: bool) -> None:
    """Delete every item of a soft-deleted namespace. Irreversible; resumable."""
    confirm(yes, f"Purge namespace id {namespace_id!r}? Every item is deleted, irreversibly.")
    note(f"purging namespace {namespace_id} (every item; re-run to resume if interrupted)...")
    started = time.monotonic()
    _registry(settings, lambda repo: repo.purge_namespace(namespace_id, settings.principal))
    elapsed = time.monotonic() - started
    note(f"purge finished in {elapsed:.1f} s")
    emit(settings, {"id": namespace_id, "purged": True}, f"namespace id {namespace_id} purged")
