"""Namespace registry requests: look up a namespace's id, register one (idempotent)."""

from __future__ import annotations

from . import keys, records
from .store import Store
from .transport import DynamoError, is_condition_failed


async def active_namespace_id(store: Store, name: str) -> str | None:
    """The id of the active namespace `name`, or None."""
    item = await store.get(keys.namespace_by_name(name))
    if item is None or item.get("status") != records.NAMESPACE_ACTIVE:
        return None
    return str(item["id"])


async def register_namespace(store: Store, name: str, *, now_iso: str) -> str:
    """Idempotent: the id of the active namespace `name`, registering it if needed."""
    existing = await active_namespace_id(store, name)
    if existing is not None:
        return existing
    ns_id = records.new_namespace_id()
    by_name, by_id = records.namespace_items(name, ns_id, now_iso)
    try:
        await store.transact(
            [
                {"Put": {"Item": by_name, "ConditionExpression": "attribute_not_exists(PK)"}},
                {"Put": {"Item": by_id, "ConditionExpression": "attribute_not_exists(PK)"}},
            ]
        )
    except DynamoError as exc:
        if not is_condition_failed(exc):
            raise
        return await register_namespace(store, name, now_iso=now_iso)
    return ns_id
