"""Reading config levels (through the config cache) and turning them into bucket stamps."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from . import config as cfg
from .caches import ConfigCache
from .core.images import Stamp
from .dynamo import keys
from .dynamo.store import Store
from .limits import Limit
from .models import OnUnavailable

if TYPE_CHECKING:
    from .table_identity import TableIdentity


def entity_config_from_items(entity_id: str, items: list[dict[str, Any]]) -> cfg.EntityConfig:
    record: cfg.EntityRecord | None = None
    levels: dict[str, cfg.Level] = {}
    version = 0
    for item in items:
        sk = item["SK"]
        if sk == keys.META:
            record = cfg.EntityRecord(
                entity_id=entity_id,
                name=item.get("name"),
                parent_id=item.get("parent_id"),
                cascade=bool(item.get("cascade", False)),
                metadata=dict(item.get("metadata") or {}),
                created_at=item.get("created_at"),
            )
        elif sk == keys.VERSION:
            version = int(item.get("ver", 0))
        elif sk.startswith(keys.ENTITY_CONFIG_PREFIX):
            levels[sk[len(keys.ENTITY_CONFIG_PREFIX) :]] = cfg.level_from_item(item)
    return cfg.EntityConfig(record, levels, version)


def system_level_from_item(item: dict[str, Any] | None) -> cfg.SystemLevel:
    if item is None:
        return cfg.SystemLevel()
    mode = item.get("on_unavailable")
    return cfg.SystemLevel(
        limits=cfg.limits_from_json(item.get("limits")),
        on_unavailable=OnUnavailable(mode) if mode else None,
        version=int(item.get("ver", 0)),
        changed_at=int(item.get("at", 0)),
    )


def stamp_for(
    resolved: cfg.Resolved,
    limits: Sequence[Limit],
    *,
    shards: int = 1,
    override: bool = False,
    now: int | None = None,
) -> Stamp:
    """The stamp for (entity, resource): limits with their schedule entries applied at `now`."""
    return Stamp(
        limits=tuple(cfg.to_params(lim, now) for lim in limits),
        parent=resolved.parent if resolved.cascade else None,
        cascade=resolved.cascade,
        disabled=resolved.disabled,
        shards=shards,
        entity_version=resolved.entity_version,
        resource_version=resolved.resource_version,
        system_version=resolved.system_version,
        override=override,
        changed_at=resolved.changed_at,
    )


class Resolver:
    """Config reads for one namespace scope.

    A fresh read that finds a level gone which this process saw stored (levels are never
    deleted, only emptied with a higher version) is evidence that the table was created again
    or the namespace purged: `identity.confirm()` then says which (`table_identity`).
    """

    def __init__(
        self,
        store: Store,
        ns: str,
        cache: ConfigCache,
        clock: Callable[[], int],
        *,
        identity: TableIdentity | None = None,
    ) -> None:
        self.store = store
        self.ns = ns
        self.cache = cache
        self.clock = clock
        self.identity = identity
        self.last_on_unavailable: OnUnavailable | None = None

    async def _gone(self, key: tuple[str, ...], item: dict[str, Any] | None) -> None:
        """Confirm the table when a level seen stored reads as absent."""
        seen = self.cache.peek(key)
        if item is None and self.identity is not None and getattr(seen, "version", 0) > 0:
            await self.identity.confirm()

    async def entity_config(self, entity_id: str) -> cfg.EntityConfig:
        """Always read (strongly): entity-level changes must never lag."""
        items = await self.store.query_all(
            keys.entity_partition(self.ns, entity_id), consistent=True
        )
        return entity_config_from_items(entity_id, items)

    async def resource_level(self, resource: str, *, fresh: bool = False) -> cfg.Level:
        key = ("resource", resource)
        if not fresh:
            found, value = self.cache.get(key, self.clock())
            if found:
                return value  # type: ignore[no-any-return]
        item = await self.store.get(keys.resource_config(self.ns, resource))
        await self._gone(key, item)
        level = cfg.level_from_item(item)
        self.cache.put(key, level, self.clock())
        return level

    async def system_level(self, *, fresh: bool = False) -> cfg.SystemLevel:
        key = ("system",)
        if not fresh:
            found, value = self.cache.get(key, self.clock())
            if found:
                return value  # type: ignore[no-any-return]
        item = await self.store.get(keys.system_config(self.ns))
        await self._gone(key, item)
        level = system_level_from_item(item)
        self.cache.put(key, level, self.clock())
        if level.on_unavailable is not None:
            self.last_on_unavailable = level.on_unavailable
        return level

    def cached_versions(self, resource: str) -> tuple[int | None, int | None]:
        """(resource version, system version) this process knows, without I/O."""
        res = self.cache.peek(("resource", resource))
        sys_level = self.cache.peek(("system",))
        return (
            None if res is None else res.version,
            None if sys_level is None else sys_level.version,
        )

    def needs_refresh(self, resource: str) -> bool:
        now = self.clock()
        fresh_res, _ = self.cache.peek_fresh(("resource", resource), now)
        fresh_sys, _ = self.cache.peek_fresh(("system",), now)
        return not (fresh_res and fresh_sys)

    async def refresh(self, resources: Sequence[str]) -> None:
        """Re-read the given resource levels and the system level, in one wave."""
        await asyncio.gather(
            self.system_level(fresh=True), *(self.resource_level(r, fresh=True) for r in resources)
        )

    async def resolve_many(
        self, entity_id: str, resources: Sequence[str]
    ) -> tuple[cfg.EntityConfig, dict[str, cfg.Resolved]]:
        """One wave of reads: the entity's partition, and each resource's and the system level."""
        entity, system, levels = await asyncio.gather(
            self.entity_config(entity_id),
            self.system_level(),
            asyncio.gather(*(self.resource_level(r) for r in resources)),
        )
        resolved = {
            resource: cfg.resolve(entity, resource, level, system)
            for resource, level in zip(resources, levels, strict=True)
        }
        return entity, resolved

    def forget(self, resource: str | None = None) -> None:
        if resource is None:
            self.cache.evict(lambda k: k[0] == "system")
        else:
            self.cache.evict(lambda k: k == ("resource", resource))
