"""Reading config levels (through the config cache and the config-read port, `ConfigReads`) and
turning them into bucket stamps. No I/O of its own: the port's implementation reads the table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from . import config as cfg
from .caches import ConfigCache
from .core.images import Stamp
from .gathering import gather_or_end
from .limits import Limit
from .models import OnUnavailable


class ConfigReads(Protocol):
    """The config-read port (beside the bucket port, `acquire.bucket_io`): what the acquire path
    reads besides bucket items, for one namespace, failures already in the acquire path's errors
    (`acquire.values`). `acquire.dynamo_io.DynamoConfigReads` implements it on DynamoDB."""

    async def entity_config(self, entity_id: str) -> cfg.EntityConfig:
        """The entity's partition (its record and levels), read strongly."""

    async def resource_level(self, resource: str) -> cfg.Level | None:
        """The resource's level; None when none is stored."""

    async def system_level(self) -> cfg.SystemLevel | None:
        """The system level; None when none is stored."""

    async def confirm_table(self) -> None:
        """Raise if the table is not the one opened, or the namespace is gone
        (`table_identity`); nothing without an identity to confirm."""

    async def confirm_table_now_and_then(self) -> None:
        """`confirm_table`, at most once per config cache lifetime."""

    async def configured_resources(self) -> list[str] | None:
        """Resource names some level has limits for; None when this role may not list them."""

    async def check_gates(self, limits: Sequence[Limit]) -> None:
        """Refuse `limits` that need a feature the stack's aggregator lacks (`admin.gates`)."""


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
    or the namespace purged: `reads.confirm_table()` then says which (`table_identity`).
    """

    def __init__(self, reads: ConfigReads, cache: ConfigCache, clock: Callable[[], int]) -> None:
        self.reads = reads
        self.cache = cache
        self.clock = clock
        self.last_on_unavailable: OnUnavailable | None = None

    async def _gone(self, key: tuple[str, ...], found: object) -> None:
        """Confirm the table when a level seen stored reads as absent."""
        seen = self.cache.peek(key)
        if found is None and getattr(seen, "version", 0) > 0:
            await self.reads.confirm_table()

    async def entity_config(self, entity_id: str) -> cfg.EntityConfig:
        """Always read (strongly): entity-level changes must never lag."""
        return await self.reads.entity_config(entity_id)

    async def resource_level(self, resource: str, *, fresh: bool = False) -> cfg.Level:
        key = ("resource", resource)
        if not fresh:
            found, value = self.cache.get(key, self.clock())
            if found:
                return value  # type: ignore[no-any-return]
        stored = await self.reads.resource_level(resource)
        await self._gone(key, stored)
        level = cfg.Level() if stored is None else stored
        self.cache.put(key, level, self.clock())
        return level

    async def system_level(self, *, fresh: bool = False) -> cfg.SystemLevel:
        key = ("system",)
        if not fresh:
            found, value = self.cache.get(key, self.clock())
            if found:
                return value  # type: ignore[no-any-return]
        stored_system = await self.reads.system_level()
        await self._gone(key, stored_system)
        level = cfg.SystemLevel() if stored_system is None else stored_system
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
        await gather_or_end(
            self.system_level(fresh=True), *(self.resource_level(r, fresh=True) for r in resources)
        )

    async def resolve_many(
        self, entity_id: str, resources: Sequence[str]
    ) -> tuple[cfg.EntityConfig, dict[str, cfg.Resolved]]:
        """One wave of reads: the entity's partition, and each resource's and the system level."""
        entity, system, levels = await gather_or_end(
            self.entity_config(entity_id),
            self.system_level(),
            gather_or_end(*(self.resource_level(r) for r in resources)),
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
