"""Namespaces: register, list, soft delete, recover, purge (docs/cli.md, `namespace`).

Each change writes one audit event, atomically with it, in the audit log of the namespace the call
is made from, subject `$NAMESPACE:<name>` (docs/audit.md): the namespace itself may be purged.
"""

from __future__ import annotations

from typing import Any

from .. import audit, validation
from ..core.times import iso_millis
from ..dynamo import keys, records
from ..dynamo.namespaces import register_namespace
from ..errors import NamespaceNotFoundError, NamespaceStateError, ValidationError
from ..models import AuditAction
from ..scope import Scope
from .changes import Changes


class Namespaces:
    """The table's namespaces: register, list, soft delete, recover, purge (audited)."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._clock = scope.store, scope.clock

    async def _namespace_event(
        self, action: str, name: str, namespace_id: str, principal: str | None
    ) -> dict[str, Any]:
        return {
            "Put": {
                "Item": await self._changes.audit_item(
                    action,
                    audit.namespace_subject(name),
                    principal=principal,
                    details={"namespace": name, "namespace_id": namespace_id},
                )
            }
        }

    async def register_namespace(self, name: str, principal: str | None = None) -> str:
        """Idempotent; returns the namespace id. Audited when it registers (docs/audit.md)."""
        validation.namespace_name(name)

        async def event(namespace_id: str) -> dict[str, Any]:
            put = await self._namespace_event(
                AuditAction.NAMESPACE_REGISTERED, name, namespace_id, principal
            )
            return dict(put["Put"]["Item"])

        return await register_namespace(
            self._store, name, created_at=iso_millis(self._clock()), audit_event=event
        )

    async def register_namespaces(
        self, names: list[str], principal: str | None = None
    ) -> dict[str, str]:
        return {name: await self.register_namespace(name, principal) for name in names}

    async def get_namespace(self, name: str) -> dict[str, Any] | None:
        validation.namespace_name(name)
        item = await self._store.get(keys.namespace_by_name(name))
        if item is None:
            return None
        return {
            "name": name,
            "id": item["id"],
            "status": item["status"],
            "created_at": item.get("created_at"),
        }

    async def list_namespaces(self) -> list[dict[str, Any]]:
        rows = await self._store.query_all(keys.NAMESPACE_NAMES_PK, consistent=True)
        return [
            {
                "name": r["SK"],
                "id": r["id"],
                "status": r["status"],
                "created_at": r.get("created_at"),
            }
            for r in rows
            if r.get("status") == records.NAMESPACE_ACTIVE
        ]

    async def list_orphan_namespaces(self) -> list[dict[str, Any]]:
        rows = await self._store.query_all(keys.NAMESPACE_IDS_PK, consistent=True)
        return [
            {
                "name": r.get("name"),
                "id": r["SK"],
                "status": r["status"],
                "created_at": r.get("created_at"),
            }
            for r in rows
            if r.get("status") == records.NAMESPACE_DELETED
        ]

    async def delete_namespace(self, name: str, principal: str | None = None) -> None:
        """Soft delete: the name stops resolving at once; the data stays until purged."""
        validation.namespace_name(name)
        item = await self._store.get(keys.namespace_by_name(name))
        if item is None:
            raise NamespaceNotFoundError(name)
        await self._store.transact(
            [
                {"Delete": {"Key": keys.namespace_by_name(name)}},
                {
                    "Update": {
                        "Key": keys.namespace_by_id(item["id"]),
                        "UpdateExpression": "SET #s = :d",
                        "ExpressionAttributeNames": {"#s": "status"},
                        "ExpressionAttributeValues": {":d": records.NAMESPACE_DELETED},
                    }
                },
                await self._namespace_event(
                    AuditAction.NAMESPACE_DELETED, name, str(item["id"]), principal
                ),
            ]
        )

    async def recover_namespace(self, namespace_id: str, principal: str | None = None) -> str:
        """Undo a soft delete; returns the name."""
        _namespace_id(namespace_id)
        item = await self._store.get(keys.namespace_by_id(namespace_id))
        if item is None:
            raise NamespaceStateError(f"no namespace has id {namespace_id!r}")
        name = str(item["name"])
        if item["status"] == records.NAMESPACE_ACTIVE:
            raise NamespaceStateError(
                f"namespace {name!r} is active; nothing to recover",
                namespace_name=name,
                state="active",
            )
        if await self._store.get(keys.namespace_by_name(name)) is not None:
            raise NamespaceStateError(
                f"the name {name!r} was registered again; it cannot be recovered under that name",
                namespace_name=name,
                state="deleted",
            )
        by_name, by_id = records.namespace_items(name, namespace_id, str(item.get("created_at")))
        await self._store.transact(
            [
                {"Put": {"Item": by_name, "ConditionExpression": "attribute_not_exists(PK)"}},
                {"Put": {"Item": by_id}},
                await self._namespace_event(
                    AuditAction.NAMESPACE_RECOVERED, name, namespace_id, principal
                ),
            ]
        )
        return name

    async def purge_namespace(self, namespace_id: str, principal: str | None = None) -> None:
        """Delete every item of a soft-deleted namespace, irreversibly. Resumable; audited once,
        when the last item goes."""
        _namespace_id(namespace_id)
        item = await self._store.get(keys.namespace_by_id(namespace_id))
        if item is None:
            raise NamespaceStateError(f"no namespace has id {namespace_id!r}")
        if item["status"] == records.NAMESPACE_ACTIVE:
            raise NamespaceStateError(
                f"namespace {item['name']!r} is active; delete it first",
                namespace_name=str(item["name"]),
                state="active",
            )
        while True:
            rows, _ = await self._store.query(namespace_id, index=keys.GSI4, limit=500)
            if not rows:
                break
            await self._store.batch_delete([keys.key(r["PK"], r["SK"]) for r in rows])
        await self._store.transact(
            [
                {"Delete": {"Key": keys.namespace_by_id(namespace_id)}},
                await self._namespace_event(
                    AuditAction.NAMESPACE_PURGED, str(item["name"]), namespace_id, principal
                ),
            ]
        )


def _namespace_id(value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError("namespace_id", value, "give the id `namespace orphans` lists")
