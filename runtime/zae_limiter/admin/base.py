"""What every admin mixin relies on: the scope's store, clock, caches and the change protocol.

An entity-level change is one transaction (the level's item, the entity's version counter, the
audit event), then a fan-out that restamps the entity's live bucket items, so every process's next
write meets the new stamp. Resource- and system-level changes are one transaction (item + audit)
and reach other processes through their config cache (`config_cache_ttl`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import audit
from .. import config as cfg
from ..acquire import RulesChanged
from ..acquire.values import Unavailable, failed_below
from ..core.images import Stamp
from ..dynamo import bucket_items as items
from ..dynamo import keys
from ..dynamo.store import Store
from ..dynamo.transport import DynamoError
from ..errors import EntityNotFoundError, FanoutIncomplete, RateLimiterUnavailable
from ..resolution import stamp_for

if TYPE_CHECKING:
    from ..acquire import Admission
    from ..resolution import Resolver
    from ..scope import Scope, Shared


async def entity_known(scope: Scope, entity_id: str, resource: str | None = None) -> bool:
    """Whether the entity has a record or any bucket item (docs/reset-and-top-up.md): one wave
    of strongly consistent reads (the bucket of `resource`, when given, covers an acquire that
    the entity-buckets index has not caught up with yet)."""
    store, ns = scope.store, scope.namespace_id
    bucket_key = None if resource is None else keys.bucket(ns, entity_id, resource)
    record, (rows, _), bucket = await asyncio.gather(
        store.get(keys.entity_meta(ns, entity_id)),
        store.query(keys.entity_buckets_index_key(ns, entity_id), index=keys.GSI3, limit=1),
        store.get(bucket_key) if bucket_key is not None else _none(),
    )
    return record is not None or bool(rows) or bucket is not None


class AdminBase:
    _store: Store
    _ns: str
    _ns_name: str
    _clock: Callable[[], int]
    _admission: Admission
    _resolver: Resolver
    _shared: Shared
    _scope: Scope

    # provided by Repository
    _forget: Callable[..., None]
    _principal: Callable[[str | None], Awaitable[str | None]]

    async def _audit_item(
        self,
        action: str,
        subject: str,
        *,
        principal: str | None,
        resource: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        retention = self._shared.version_record.get("audit_retention_days")
        return audit.event_item(
            self._ns,
            action=action,
            entity_id=subject,
            principal=await self._principal(principal),
            resource=resource,
            details=details or {},
            now_ms=self._clock(),
            retention_days=int(retention) if retention else audit.DEFAULT_RETENTION_DAYS,
        )

    async def _transact(self, operations: list[dict[str, Any]]) -> None:
        try:
            await self._store.transact(operations, token=audit.ulid(self._clock()))
        except DynamoError as exc:
            from ..dynamo.transport import TransactionCancelled

            if isinstance(exc, TransactionCancelled):
                raise
            raise RateLimiterUnavailable(
                "the change could not be written", exc, table_name=self._store.table
            ) from exc

    def _version_bump(self, entity_id: str) -> dict[str, Any]:
        key = keys.entity_version(self._ns, entity_id)
        return {
            "Update": {
                "Key": key,
                "UpdateExpression": "ADD ver :one SET GSI4PK = :ns, GSI4SK = :sk",
                "ExpressionAttributeValues": {
                    ":one": 1,
                    ":ns": self._ns,
                    ":sk": f"{key['PK']}#{key['SK']}",
                },
            }
        }

    async def _entity_known(self, entity_id: str, resource: str | None = None) -> bool:
        return await entity_known(self._scope, entity_id, resource)

    async def _require_known(self, entity_id: str, resource: str | None = None) -> None:
        """EntityNotFoundError for an entity that has neither a record nor a bucket item: a
        mistyped customer id must never buy credit or look disabled."""
        if not await self._entity_known(entity_id, resource):
            raise EntityNotFoundError(entity_id)

    async def _fanout(self, entity_id: str, resource: str | None = None) -> int:
        """Restamp the entity's live bucket items under its current config. Returns the count."""
        prefix = None if resource in (None, keys.DEFAULT_RESOURCE) else f"{resource}#"
        stamped = 0
        left: list[str] = []  # items (resource#shard) not restamped
        cause: BaseException | None = None
        self._forget(entity_id)
        try:
            rows = await self._store.query_all(
                keys.entity_buckets_index_key(self._ns, entity_id),
                index=keys.GSI3,
                sk_prefix=prefix,
            )
            if not rows:
                return 0
            found = await self._store.batch_get(
                [keys.key(r["PK"], r["SK"]) for r in rows], consistent=True
            )
            images = [items.parse(item) for item in found]
            resources = sorted({image.resource for image in images})
            entity, system, levels = await asyncio.gather(
                self._resolver.entity_config(entity_id),
                self._resolver.system_level(fresh=True),
                asyncio.gather(*(self._resolver.resource_level(r, fresh=True) for r in resources)),
            )
            by_resource = dict(zip(resources, levels, strict=True))
            for image in images:
                res = cfg.resolve(entity, image.resource, by_resource[image.resource], system)
                if image.stamp.override:
                    limits: tuple[Any, ...] | None = tuple(
                        cfg.from_params(p, configured=True) for p in image.stamp.limits
                    )
                else:
                    limits = res.limits
                wanted = stamp_for(
                    res,
                    limits or (),
                    shards=image.stamp.shards,
                    override=image.stamp.override,
                    now=self._clock(),
                )
                if image.stamp.same_rules(wanted) and _versions(image.stamp) == _versions(wanted):
                    continue
                try:
                    await self._admission.restamp(image, wanted)
                except RulesChanged as changed:
                    # Deleted meanwhile, or restamped by a later change's own fan-out: nothing
                    # left to do. Else rewritten faster than this could: left for a re-run.
                    current = await self._store.get(keys.bucket(*image.address), consistent=True)
                    if current is not None and not _caught_up(items.parse(current).stamp, wanted):
                        left.append(f"{image.resource}#{image.shard}")
                        cause = changed
                    continue
                stamped += 1
        except (DynamoError, Unavailable, RateLimiterUnavailable) as exc:
            raise FanoutIncomplete(
                stamped, failed_below(exc), entity_id=entity_id, resource=resource, left=left
            ) from exc
        finally:
            self._forget(entity_id)
        if left:
            raise FanoutIncomplete(
                stamped, cause, entity_id=entity_id, resource=resource, left=left
            )
        return stamped


def _versions(stamp: Stamp) -> tuple[int, int, int]:
    return (stamp.entity_version, stamp.resource_version, stamp.system_version)


async def _none() -> None:
    return None


def _caught_up(current: Stamp, wanted: Stamp) -> bool:
    """The item's stamp is from this change's config versions or later ones."""
    return all(c >= w for c, w in zip(_versions(current), _versions(wanted), strict=True))
