"""`Flags`: disable / enable / bypass flags and cascade policies, per resource and per entity."""

from __future__ import annotations

from typing import Any

from .. import config as cfg
from .. import validation
from ..dynamo import keys
from ..scope import Scope
from .changes import KEEP, Changes


class Flags:
    """The flags of the config levels; each change is one level write (`Changes`)."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._ns = scope.store, scope.namespace_id

    async def _resource_flag(
        self, resource: str, principal: str | None, *, disabled: Any = KEEP, cascade: Any = KEEP
    ) -> int:
        validation.resource_name(resource)
        await self._changes.gates_for(None, disabled, cascade)
        await self._changes.change_resource_level(
            resource, principal, disabled=disabled, cascade=cascade, kind=_kind(disabled)
        )
        return 0  # resource-level changes reach buckets through each process's config cache

    async def _entity_flag(
        self,
        entity_id: str,
        resource: str | None,
        principal: str | None,
        *,
        disabled: Any = KEEP,
        cascade: Any = KEEP,
    ) -> int:
        validation.entity_id(entity_id)
        level = resource or keys.DEFAULT_RESOURCE
        validation.resource_name(level, allow_default=True)
        await self._changes.gates_for(None, disabled, cascade)
        if disabled is True or disabled == "bypass":
            await self._changes.require_known(entity_id, resource)
        return await self._changes.change_entity_level(
            entity_id, level, principal, disabled=disabled, cascade=cascade, kind=_kind(disabled)
        )

    # --- resource level --------------------------------------------------------------------------

    async def disable_resource(self, resource: str, principal: str | None = None) -> int:
        """Refuse the resource for everyone (`ResourceDisabled`)."""
        return await self._resource_flag(resource, principal, disabled=True)

    async def enable_resource(self, resource: str, principal: str | None = None) -> int:
        """Store an explicit "enabled"."""
        return await self._resource_flag(resource, principal, disabled=False)

    async def clear_resource_disabled(self, resource: str, principal: str | None = None) -> int:
        """Back to inherit: lifts disable, enable and bypass alike."""
        return await self._resource_flag(resource, principal, disabled=None)

    async def bypass_resource(self, resource: str, principal: str | None = None) -> int:
        """Admit everyone without debiting balances; consumption is still counted."""
        return await self._resource_flag(resource, principal, disabled="bypass")

    async def get_resource_disabled(self, resource: str) -> bool | str | None:
        validation.resource_name(resource)
        item = await self._store.get(keys.resource_config(self._ns, resource))
        return cfg.level_from_item(item).disabled

    async def set_resource_cascade(
        self, resource: str, cascade: bool, principal: str | None = None
    ) -> int:
        """Per-resource cascade policy: children debit their parent on this resource."""
        return await self._resource_flag(resource, principal, cascade=bool(cascade))

    async def clear_resource_cascade(self, resource: str, principal: str | None = None) -> int:
        return await self._resource_flag(resource, principal, cascade=None)

    async def get_resource_cascade(self, resource: str) -> bool | None:
        validation.resource_name(resource)
        item = await self._store.get(keys.resource_config(self._ns, resource))
        return cfg.level_from_item(item).cascade

    # --- entity level ----------------------------------------------------------------------------

    async def disable_entity(
        self, entity_id: str, resource: str | None = None, principal: str | None = None
    ) -> int:
        return await self._entity_flag(entity_id, resource, principal, disabled=True)

    async def enable_entity(
        self, entity_id: str, resource: str | None = None, principal: str | None = None
    ) -> int:
        """Explicit enable: readmits one entity to a disabled resource."""
        return await self._entity_flag(entity_id, resource, principal, disabled=False)

    async def clear_entity_disabled(
        self, entity_id: str, resource: str | None = None, principal: str | None = None
    ) -> int:
        """Back to inherit; also how an entity bypass is lifted."""
        return await self._entity_flag(entity_id, resource, principal, disabled=None)

    async def bypass_entity(
        self, entity_id: str, resource: str | None = None, principal: str | None = None
    ) -> int:
        """Bypass for one entity (never extends to its parent)."""
        return await self._entity_flag(entity_id, resource, principal, disabled="bypass")

    async def get_entity_disabled(
        self, entity_id: str, resource: str | None = None
    ) -> bool | str | None:
        validation.entity_id(entity_id)
        item = await self._store.get(
            keys.entity_config(self._ns, entity_id, resource or keys.DEFAULT_RESOURCE)
        )
        return cfg.level_from_item(item).disabled

    async def set_entity_cascade(
        self,
        entity_id: str,
        cascade: bool,
        resource: str | None = None,
        principal: str | None = None,
    ) -> int:
        return await self._entity_flag(entity_id, resource, principal, cascade=bool(cascade))

    async def clear_entity_cascade(
        self, entity_id: str, resource: str | None = None, principal: str | None = None
    ) -> int:
        return await self._entity_flag(entity_id, resource, principal, cascade=None)

    async def get_entity_cascade(self, entity_id: str, resource: str | None = None) -> bool | None:
        validation.entity_id(entity_id)
        item = await self._store.get(
            keys.entity_config(self._ns, entity_id, resource or keys.DEFAULT_RESOURCE)
        )
        return cfg.level_from_item(item).cascade


def _kind(disabled: Any) -> str:
    """The audit detail of a flag change."""
    return "disabled" if disabled is not KEEP else "cascade"
