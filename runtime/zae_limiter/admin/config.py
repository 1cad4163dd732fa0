"""`Config`: the config levels: entity (per resource or `_default_`), resource defaults, system
defaults; set, read, delete, list and explain."""

from __future__ import annotations

import base64
import json
from typing import Any

from .. import audit, validation
from .. import config as cfg
from ..acquire.dynamo_io import system_level_from_item
from ..dynamo import keys
from ..errors import ValidationError
from ..gathering import gather_or_end
from ..limits import Limit, check_limit_list
from ..models import AuditAction, ConfigSource, OnUnavailable
from ..scope import Scope
from .changes import KEEP, Changes


def _check_disabled(value: Any) -> None:
    if value is not KEEP and value not in (True, False, "bypass", None):
        raise ValidationError("disabled", value, "use True, False, 'bypass' or None (inherit)")


def _check_cascade(value: Any) -> None:
    if value is not KEEP and value not in (True, False, None):
        raise ValidationError("cascade", value, "use True, False or None (inherit)")


class Config:
    """Each level's limits and stored mode: written through `Changes`, explained by the
    resolver."""

    def __init__(self, scope: Scope, changes: Changes) -> None:
        self._changes = changes
        self._store, self._ns, self._resolver = scope.store, scope.namespace_id, scope.resolver

    # --- entity level ----------------------------------------------------------------------------

    async def set_limits(
        self,
        entity_id: str,
        limits: list[Limit],
        resource: str = keys.DEFAULT_RESOURCE,
        principal: str | None = None,
        *,
        disabled: Any = KEEP,
        cascade: Any = KEEP,
    ) -> None:
        """Replace the entity's whole list at that level; effective on its next call."""
        validation.entity_id(entity_id)
        validation.resource_name(resource, allow_default=True)
        limits = check_limit_list(limits)
        _check_disabled(disabled)
        _check_cascade(cascade)
        await self._changes.gates_for(limits, disabled, cascade)
        await self._register_entity_config_resource(resource)
        await self._changes.change_entity_level(
            entity_id, resource, principal, limits=limits, disabled=disabled, cascade=cascade
        )

    async def get_limits(
        self, entity_id: str, resource: str = keys.DEFAULT_RESOURCE
    ) -> list[Limit]:
        """That level only, no inheritance; [] if none."""
        validation.entity_id(entity_id)
        validation.resource_name(resource, allow_default=True)
        item = await self._store.get(keys.entity_config(self._ns, entity_id, resource))
        return list(cfg.level_from_item(item).limits or ())

    async def delete_limits(
        self, entity_id: str, resource: str = keys.DEFAULT_RESOURCE, principal: str | None = None
    ) -> None:
        """Remove the level; balances are cut to the next level's ceilings on the next call."""
        validation.entity_id(entity_id)
        validation.resource_name(resource, allow_default=True)
        await self._changes.change_entity_level(
            entity_id, resource, principal, limits=None, action=AuditAction.LIMITS_DELETED
        )

    async def list_entities_with_custom_limits(
        self, resource: str, limit: int | None = None, cursor: str | None = None
    ) -> tuple[list[str], str | None]:
        validation.resource_name(resource, allow_default=True)
        start = json.loads(base64.urlsafe_b64decode(cursor)) if cursor else None
        rows, last = await self._store.query(
            keys.entity_config_index_key(self._ns, resource),
            index=keys.GSI3,
            limit=limit,
            start_key=start,
        )
        ids = [row["GSI3SK"] for row in rows]
        next_cursor = base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None
        return ids, next_cursor

    async def _register_entity_config_resource(self, resource: str) -> None:
        key = keys.key(keys.entity_config_resources_partition(self._ns), resource)
        await self._store.put(
            {**key, **keys.namespace_index_attributes(self._ns, key["PK"], key["SK"])}
        )

    async def list_resources_with_entity_configs(self) -> list[str]:
        rows = await self._store.query_all(keys.entity_config_resources_partition(self._ns))
        out = []
        for row in rows:
            ids, _ = await self.list_entities_with_custom_limits(row["SK"], limit=1)
            if ids:
                out.append(row["SK"])
        return sorted(out)

    # --- resource level --------------------------------------------------------------------------

    async def set_resource_defaults(
        self,
        resource: str,
        limits: list[Limit],
        principal: str | None = None,
        *,
        disabled: Any = KEEP,
        cascade: Any = KEEP,
    ) -> None:
        """Replace the resource level ("free plan"); every process within config_cache_ttl."""
        validation.resource_name(resource)
        limits = check_limit_list(limits)
        _check_disabled(disabled)
        _check_cascade(cascade)
        await self._changes.gates_for(limits, disabled, cascade)
        await self._changes.change_resource_level(
            resource, principal, limits=limits, disabled=disabled, cascade=cascade
        )

    async def get_resource_defaults(self, resource: str) -> list[Limit]:
        validation.resource_name(resource)
        item = await self._store.get(keys.resource_config(self._ns, resource))
        return list(cfg.level_from_item(item).limits or ())

    async def delete_resource_defaults(self, resource: str, principal: str | None = None) -> None:
        validation.resource_name(resource)
        await self._changes.change_resource_level(
            resource, principal, limits=None, action=AuditAction.LIMITS_DELETED
        )

    async def list_resources_with_defaults(self) -> list[str]:
        prefix = f"{self._ns}#R#"
        rows = await self._store.query_all(self._ns, index=keys.GSI4, sk_prefix=prefix)
        found = (
            await self._store.batch_get([keys.key(r["PK"], r["SK"]) for r in rows]) if rows else []
        )
        return sorted(i["PK"][len(prefix) :] for i in found if i.get("limits") is not None)

    # --- system level ----------------------------------------------------------------------------

    async def set_system_defaults(
        self,
        limits: list[Limit],
        on_unavailable: OnUnavailable | str | None = None,
        principal: str | None = None,
    ) -> None:
        """Namespace-wide fallback limits, and the stored unavailability mode."""
        limits = check_limit_list(limits)
        mode = _mode(on_unavailable)
        await self._changes.gates_for(limits, KEEP, KEEP)
        await self._changes.write_level(
            keys.system_config(self._ns),
            subject=audit.SYSTEM_SUBJECT,
            resource=None,
            limits=limits,
            on_unavailable=mode,
            principal=principal,
        )
        self._changes.forget(resource=None)

    async def get_system_defaults(self) -> tuple[list[Limit], OnUnavailable | None]:
        level = system_level_from_item(await self._store.get(keys.system_config(self._ns)))
        return list(level.limits or ()), level.on_unavailable

    async def delete_system_defaults(self, principal: str | None = None) -> None:
        await self._changes.write_level(
            keys.system_config(self._ns),
            subject=audit.SYSTEM_SUBJECT,
            resource=None,
            limits=None,
            on_unavailable=None,
            principal=principal,
            action=AuditAction.LIMITS_DELETED,
        )
        self._changes.forget(resource=None)

    # --- explaining ------------------------------------------------------------------------------

    async def resolve_limits(
        self, entity_id: str, resource: str
    ) -> tuple[list[Limit] | None, OnUnavailable | None, ConfigSource | None]:
        """The effective list for (entity, resource) and which level supplied it."""
        validation.entity_id(entity_id)
        validation.resource_name(resource)
        _, resolved = await self._resolver.resolve_many(entity_id, [resource])
        system = await self._resolver.system_level()
        res = resolved[resource]
        return (None if res.limits is None else list(res.limits)), system.on_unavailable, res.source

    async def configured_resources(self) -> list[str]:
        """Resource names some level has limits for (the unmetered policy's suggestions)."""
        defaults, entity_levels = await gather_or_end(
            self.list_resources_with_defaults(), self.list_resources_with_entity_configs()
        )
        return sorted({*defaults, *entity_levels} - {keys.DEFAULT_RESOURCE})


def _mode(value: OnUnavailable | str | None) -> OnUnavailable | None:
    if value is None or isinstance(value, OnUnavailable):
        return value
    try:
        return OnUnavailable(value)
    except ValueError:
        raise ValidationError("on_unavailable", value, "use 'allow' or 'block'") from None
