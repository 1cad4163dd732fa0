"""Entities: create, read, delete, children, and moving an entity to another parent."""

from __future__ import annotations

from typing import Any

from .. import validation
from ..core.times import iso_millis
from ..dynamo import keys
from ..dynamo.transport import TransactionCancelled
from ..errors import EntityExistsError, EntityNotFoundError, ValidationError
from ..models import AuditAction, Entity
from ..scope import Scope
from .changes import Changes

#: A usage tombstone outlives every stream record it can meet (the stream keeps 24 h).
TOMBSTONE_TTL_S = 72 * 3600


def _entity_from_item(item: dict[str, Any]) -> Entity:
    return Entity(
        id=item["entity_id"],
        name=item.get("name"),
        parent_id=item.get("parent_id"),
        cascade=bool(item.get("cascade", False)),
        metadata=dict(item.get("metadata") or {}),
        created_at=item.get("created_at"),
    )


class Entities:
    """Entity records: create, read, delete, children, moving to another parent."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock

    async def create_entity(
        self,
        entity_id: str,
        name: str | None = None,
        parent_id: str | None = None,
        cascade: bool = False,
        metadata: dict[str, str] | None = None,
        principal: str | None = None,
    ) -> Entity:
        """Create the entity record (audited). The parent must exist and be a root."""
        validation.entity_id(entity_id)
        if parent_id is not None:
            validation.entity_id(parent_id, "parent_id")
            if parent_id == entity_id:
                raise ValidationError("parent_id", parent_id, "an entity cannot be its own parent")
        meta = validation.metadata(metadata)
        if name is not None and not isinstance(name, str):
            raise ValidationError("name", name, "must be a string")
        if parent_id is not None:
            await self._check_parent(parent_id)
        key = keys.entity_meta(self._ns, entity_id)
        item: dict[str, Any] = {
            **key,
            **keys.namespace_index_attributes(self._ns, key["PK"], key["SK"]),
            "entity_id": entity_id,
            "cascade": bool(cascade),
            "metadata": meta,
            "created_at": iso_millis(self._clock()),
        }
        if name is not None:
            item["name"] = name
        if parent_id is not None:
            item["parent_id"] = parent_id
            item["GSI1PK"] = keys.children_index_key(self._ns, parent_id)
            item["GSI1SK"] = entity_id
        operations: list[dict[str, Any]] = [
            {"Put": {"Item": item, "ConditionExpression": "attribute_not_exists(PK)"}},
            self._changes.version_bump(entity_id),
            {
                "Put": {
                    "Item": await self._changes.audit_item(
                        AuditAction.ENTITY_CREATED,
                        entity_id,
                        principal=principal,
                        details={
                            "name": name,
                            "parent_id": parent_id,
                            "cascade": bool(cascade),
                            "metadata": meta,
                        },
                    )
                }
            },
        ]
        if parent_id is not None:
            operations.append(self._parent_is_root(parent_id))
        try:
            await self._changes.transact(operations)
        except TransactionCancelled as exc:
            codes = [r.get("Code") for r in exc.reasons]
            if codes and codes[0] == "ConditionalCheckFailed":
                raise EntityExistsError(entity_id) from None
            raise ValidationError(
                "parent_id", parent_id, "the parent must exist and must not have a parent itself"
            ) from None
        if parent_id is not None:
            await self._changes.fanout(entity_id)
        return _entity_from_item(item)

    def _parent_is_root(self, parent_id: str) -> dict[str, Any]:
        return {
            "ConditionCheck": {
                "Key": keys.entity_meta(self._ns, parent_id),
                "ConditionExpression": "attribute_exists(PK) AND attribute_not_exists(parent_id)",
            }
        }

    async def _check_parent(self, parent_id: str) -> None:
        parent = await self.get_entity(parent_id, consistent_read=True)
        if parent is None:
            raise EntityNotFoundError(parent_id)
        if parent.parent_id is not None:
            raise ValidationError(
                "parent_id",
                parent_id,
                f"{parent_id!r} has a parent itself ({parent.parent_id!r}); only two levels "
                "(user and organisation) are allowed",
            )

    async def get_entity(self, entity_id: str, *, consistent_read: bool = False) -> Entity | None:
        validation.entity_id(entity_id)
        item = await self._store.get(
            keys.entity_meta(self._ns, entity_id), consistent=consistent_read
        )
        return None if item is None else _entity_from_item(item)

    async def get_children(self, parent_id: str) -> list[Entity]:
        """Direct children, sorted by id."""
        validation.entity_id(parent_id, "parent_id")
        rows = await self._store.query_all(
            keys.children_index_key(self._ns, parent_id), index=keys.GSI1
        )
        if not rows:
            return []
        found = await self._store.batch_get([keys.key(r["PK"], r["SK"]) for r in rows])
        children = [_entity_from_item(i) for i in found if i.get("parent_id") == parent_id]
        return sorted(children, key=lambda e: e.id)

    async def delete_entity(self, entity_id: str, principal: str | None = None) -> None:
        """Delete the record, config, buckets and snapshots. Refused while it has children.

        A usage tombstone, written with the audit event, makes the aggregator drop the stream
        records of this entity's writes up to now, so lagging records cannot bring its usage back
        and a re-created entity starts at zero (docs/usage.md).
        """
        validation.entity_id(entity_id)
        if await self.get_children(entity_id):
            raise ValidationError(
                "entity_id", entity_id, "it still has children; move or delete them first"
            )
        now = self._clock()
        tombstone = keys.usage_tombstone(self._ns, entity_id)
        await self._changes.transact(
            [
                {
                    "Put": {
                        "Item": await self._changes.audit_item(
                            AuditAction.ENTITY_DELETED, entity_id, principal=principal
                        )
                    }
                },
                self._changes.version_bump(entity_id),
                {
                    "Put": {
                        "Item": {
                            **tombstone,
                            **keys.namespace_index_attributes(
                                self._ns, tombstone["PK"], tombstone["SK"]
                            ),
                            "deleted_ms": now,
                            "ttl": now // 1000 + TOMBSTONE_TTL_S,
                        }
                    }
                },
            ]
        )
        doomed = await self._store.query_all(
            keys.entity_partition(self._ns, entity_id), consistent=True
        )
        buckets = await self._store.query_all(
            keys.entity_buckets_index_key(self._ns, entity_id), index=keys.GSI3
        )
        usage = await self._store.query_all(
            keys.usage_partition(self._ns, entity_id), consistent=True
        )
        await self._store.batch_delete(
            [keys.key(i["PK"], i["SK"]) for i in (*doomed, *buckets, *usage)]
        )
        self._changes.forget(entity_id)

    async def set_parent(
        self, entity_id: str, parent_id: str | None, *, principal: str | None = None
    ) -> int:
        """Move an entity under a new parent (or none). Returns the bucket items updated."""
        validation.entity_id(entity_id)
        if parent_id is not None:
            validation.entity_id(parent_id, "parent_id")
            if parent_id == entity_id:
                raise ValidationError("parent_id", parent_id, "an entity cannot be its own parent")
        await self._changes.gate("set_parent")
        current = await self.get_entity(entity_id, consistent_read=True)
        if current is None:
            raise EntityNotFoundError(entity_id)
        if current.parent_id == parent_id:
            return 0
        if parent_id is not None:
            await self._check_parent(parent_id)
            if await self.get_children(entity_id):
                raise ValidationError(
                    "entity_id", entity_id, "it has children, so it cannot be given a parent"
                )
        key = keys.entity_meta(self._ns, entity_id)
        if parent_id is None:
            update = "REMOVE parent_id, GSI1PK, GSI1SK"
            values: dict[str, Any] = {}
        else:
            update = "SET parent_id = :p, GSI1PK = :g, GSI1SK = :e"
            values = {
                ":p": parent_id,
                ":g": keys.children_index_key(self._ns, parent_id),
                ":e": entity_id,
            }
        operations: list[dict[str, Any]] = [
            {
                "Update": {
                    "Key": key,
                    "UpdateExpression": update,
                    "ConditionExpression": "attribute_exists(PK)",
                    **({"ExpressionAttributeValues": values} if values else {}),
                }
            },
            self._changes.version_bump(entity_id),
        ]
        if parent_id is not None:
            operations.append(self._parent_is_root(parent_id))
        live = await self._store.query_all(
            keys.entity_buckets_index_key(self._ns, entity_id), index=keys.GSI3
        )
        operations.append(
            {
                "Put": {
                    "Item": await self._changes.audit_item(
                        AuditAction.ENTITY_PARENT_CHANGED,
                        entity_id,
                        principal=principal,
                        details={"old": current.parent_id, "new": parent_id, "buckets": len(live)},
                    )
                }
            }
        )
        try:
            await self._changes.transact(operations)
        except TransactionCancelled:
            raise ValidationError(
                "parent_id", parent_id, "the parent must exist and must not have a parent itself"
            ) from None
        return await self._changes.fanout(entity_id)
