"""Namespace registry requests: look up a namespace's id, register one (idempotent)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .. import namespace_labels
from . import keys, records
from .failures import DynamoError, is_condition_failed
from .store import Store


async def active_namespace_id(store: Store, name: str) -> str | None:
    """The id of the active namespace `name`, or None."""
    item = await store.get(keys.namespace_by_name(name))
    if item is None or item.get("status") != records.NAMESPACE_ACTIVE:
        return None
    namespace_labels.seen(str(item["id"]), name)
    return str(item["id"])


async def register_namespace(
    store: Store,
    name: str,
    *,
    created_at: str,
    audit_event: Callable[[str], Awaitable[dict[str, Any]]] | None = None,
) -> str:
    """Idempotent: the id of the active namespace `name`, registering it if needed.

    `audit_event(namespace_id)` makes the audit item written with the registration (only when
    this call registers it).
    """
    existing = await active_namespace_id(store, name)
    if existing is not None:
        return existing
    ns_id = records.new_namespace_id()
    by_name, by_id = records.namespace_items(name, ns_id, created_at)
    operations: list[dict[str, Any]] = [
        {"Put": {"Item": by_name, "ConditionExpression": "attribute_not_exists(PK)"}},
        {"Put": {"Item": by_id, "ConditionExpression": "attribute_not_exists(PK)"}},
    ]
    if audit_event is not None:
        operations.append({"Put": {"Item": await audit_event(ns_id)}})
    try:
        await store.transact(operations)
    except DynamoError as exc:
        if not is_condition_failed(exc):
            raise
        return await register_namespace(store, name, created_at=created_at, audit_event=audit_event)
    return ns_id
