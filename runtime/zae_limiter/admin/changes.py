"""`Changes`: the config-change protocol every admin service writes through.

An entity-level change is one transaction (the level's item, the entity's version counter, the
audit event), then a fan-out that restamps the entity's live bucket items, so every process's next
write meets the new stamp. Resource- and system-level changes are one transaction (item + audit)
and reach other processes through their config cache (`config_cache_ttl`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Protocol

from .. import audit
from .. import config as cfg
from ..acquire import RulesChanged
from ..acquire.values import Unavailable, failed_below
from ..connection import caller_identity
from ..core.images import Stamp
from ..core.ulids import ulid
from ..dynamo import bucket_items as items
from ..dynamo import keys, transport
from ..dynamo.transport import DynamoError, TransactionCancelled
from ..errors import EntityNotFoundError, FanoutIncomplete, RateLimiterUnavailable
from ..gathering import gather_or_end
from ..models import AuditAction, OnUnavailable
from ..resolution import stamp_for
from ..scope import Scope
from .gates import check_gate, limit_gates

KEEP: Any = object()  # "leave the stored flag as it is"
#: Writes of one level that collide with a concurrent change of it (TransactionConflict) are
#: sent again this many times in all; nothing of a cancelled transaction was written.
WRITE_ATTEMPTS = 16
#: The longest wait between two of those attempts (full jitter below it).
WRITE_BACKOFF_CAP_S = 1.0


class Forget(Protocol):
    """Clears this process's cached state that an administrative write made stale."""

    def __call__(self, entity_id: str | None = None, resource: str | None = None) -> None: ...


async def entity_known(scope: Scope, entity_id: str, resource: str | None = None) -> bool:
    """Whether the entity has a record or any bucket item (docs/reset-and-top-up.md): one wave
    of strongly consistent reads (the bucket of `resource`, when given, covers an acquire that
    the entity-buckets index has not caught up with yet)."""
    store, ns = scope.store, scope.namespace_id
    bucket_key = None if resource is None else keys.bucket(ns, entity_id, resource)
    record, (rows, _), bucket = await gather_or_end(
        store.get(keys.entity_meta(ns, entity_id)),
        store.query(keys.entity_buckets_index_key(ns, entity_id), index=keys.GSI3, limit=1),
        store.get(bucket_key) if bucket_key is not None else _none(),
    )
    return record is not None or bool(rows) or bucket is not None


class Changes:
    """Audit events, transactions, version bumps, level writes and the fan-out, for one scope.

    `forget` clears what the repository's caches hold about what a change touched."""

    def __init__(self, scope: Scope, forget: Forget) -> None:
        self._scope = scope
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock
        self.forget = forget

    async def principal(self, explicit: str | None) -> str | None:
        """The audit principal: the caller's, else this client's AWS identity (looked up once
        per opened repository, never against a local endpoint)."""
        if explicit is not None:
            return explicit
        shared = self._scope.shared
        if not shared.principal_resolved:
            shared.principal_resolved = True
            if shared.endpoint_url is None:
                shared.principal = await caller_identity(shared.transport.region)
        return shared.principal

    async def audit_item(
        self,
        action: str,
        subject: str,
        *,
        principal: str | None,
        resource: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        retention = self._scope.shared.version_record.get("audit_retention_days")
        return audit.event_item(
            self._ns,
            action=action,
            entity_id=subject,
            principal=await self.principal(principal),
            resource=resource,
            details=details or {},
            now_ms=self._clock(),
            retention_days=int(retention) if retention else audit.DEFAULT_RETENTION_DAYS,
        )

    async def transact(self, operations: list[dict[str, Any]]) -> None:
        try:
            await self._store.transact(operations, token=ulid(self._clock()))
        except DynamoError as exc:
            if isinstance(exc, TransactionCancelled):
                raise
            raise RateLimiterUnavailable(
                "the change could not be written", exc, table_name=self._store.table
            ) from exc

    def version_bump(self, entity_id: str) -> dict[str, Any]:
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

    async def entity_known(self, entity_id: str, resource: str | None = None) -> bool:
        return await entity_known(self._scope, entity_id, resource)

    async def require_known(self, entity_id: str, resource: str | None = None) -> None:
        """EntityNotFoundError for an entity that has neither a record nor a bucket item: a
        mistyped customer id must never buy credit or look disabled."""
        if not await self.entity_known(entity_id, resource):
            raise EntityNotFoundError(entity_id)

    async def gate(self, feature: str) -> None:
        """Refuse `feature` unless the stack's aggregator supports it (docs/versions.md)."""
        await check_gate(self._scope, feature)

    async def gates_for(self, limits: Any, disabled: Any, cascade: Any) -> None:
        features = limit_gates(limits) if isinstance(limits, list) else []
        if disabled == "bypass":
            features.append("bypass")
        if cascade is not KEEP:
            features.append("cascade_policy")
        for feature in features:
            await self.gate(feature)

    # --- one level's write -----------------------------------------------------------------------

    async def write_level(
        self,
        key: dict[str, str],
        *,
        subject: str,
        resource: str | None,
        limits: Any = KEEP,
        disabled: Any = KEEP,
        cascade: Any = KEEP,
        on_unavailable: Any = KEEP,
        principal: str | None,
        entity_id: str | None = None,
        action: str = AuditAction.LIMITS_SET,
        kind: str | None = None,
    ) -> None:
        sets = ["GSI4PK = :ns", "GSI4SK = :g4", "#at = :at"]
        removes: list[str] = []
        values: dict[str, Any] = {
            ":one": 1,
            ":ns": self._ns,
            ":g4": f"{key['PK']}#{key['SK']}",
            ":at": self._clock(),
        }
        details: dict[str, Any] = {}
        names: dict[str, str] = {"#at": "at"}
        if kind:
            details["kind"] = kind
        if limits is not KEEP:
            if limits is None:
                removes += ["limits", "GSI3PK", "GSI3SK"]
            else:
                sets.append("limits = :limits")
                values[":limits"] = cfg.limits_to_json(limits)
                if entity_id is not None and resource is not None:
                    sets += ["GSI3PK = :g3", "GSI3SK = :e"]
                    values[":g3"] = keys.entity_config_index_key(self._ns, resource)
                    values[":e"] = entity_id
            details["limits"] = (
                None if limits is None else [{"name": lim.name, **lim.to_dict()} for lim in limits]
            )
        for name, value in (
            ("disabled", disabled),
            ("cascade", cascade),
            ("on_unavailable", on_unavailable),
        ):
            if value is KEEP:
                continue
            names[f"#{name}"] = name
            if value is None:
                removes.append(f"#{name}")
            else:
                sets.append(f"#{name} = :{name}")
                values[f":{name}"] = value.value if isinstance(value, OnUnavailable) else value
            details[name] = value.value if isinstance(value, OnUnavailable) else value
        expression = "SET " + ", ".join(sets) + " ADD ver :one"
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        guard = _changes_something(sets, removes)
        operations: list[dict[str, Any]] = [
            {
                "Update": {
                    "Key": key,
                    "UpdateExpression": expression,
                    "ExpressionAttributeValues": values,
                    **({"ExpressionAttributeNames": names} if names else {}),
                    **({"ConditionExpression": guard} if guard else {}),
                }
            },
            {
                "Put": {
                    "Item": await self.audit_item(
                        action, subject, principal=principal, resource=resource, details=details
                    )
                }
            },
        ]
        if entity_id is not None:
            operations.append(self.version_bump(entity_id))
        # This process's changes of one partition go one at a time: concurrent ones would only
        # collide (TransactionConflict) and retry; other processes' are retried below.
        async with self._scope.shared.partition_turns.turn(key["PK"]):
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    await self.transact(operations)
                    return
                except TransactionCancelled as cancelled:
                    codes = [reason.get("Code") for reason in cancelled.reasons]
                    if codes[:1] == ["ConditionalCheckFailed"]:
                        # The level already holds exactly this: nothing changed, nothing to
                        # audit. (A re-run after FanoutIncomplete lands here, then fans out.)
                        return
                    if "TransactionConflict" not in codes or attempt + 1 == WRITE_ATTEMPTS:
                        raise RateLimiterUnavailable(
                            "the change could not be written",
                            cancelled,
                            table_name=self._store.table,
                        ) from cancelled
                # another process changed the level meanwhile: nothing was written, try again
                delay = min(WRITE_BACKOFF_CAP_S, 0.02 * 2**attempt)
                await asyncio.sleep(transport.backoff_scale * delay * random.random())

    async def change_entity_level(
        self, entity_id: str, resource: str, principal: str | None, **changes: Any
    ) -> int:
        """One entity-level write (level, version, audit), then restamp the live buckets.
        Returns the bucket items updated."""
        await self.write_level(
            keys.entity_config(self._ns, entity_id, resource),
            subject=entity_id,
            resource=resource,
            principal=principal,
            entity_id=entity_id,
            **changes,
        )
        return await self.fanout(entity_id, resource)

    async def change_resource_level(
        self, resource: str, principal: str | None, **changes: Any
    ) -> None:
        """One resource-level write (level, audit); other processes learn it within the TTL."""
        await self.write_level(
            keys.resource_config(self._ns, resource),
            subject=audit.resource_subject(resource),
            resource=resource,
            principal=principal,
            **changes,
        )
        self.forget(resource=resource)

    # --- the fan-out ----------------------------------------------------------------------------

    async def fanout(self, entity_id: str, resource: str | None = None) -> int:
        """Restamp the entity's live bucket items under its current config. Returns the count."""
        prefix = None if resource in (None, keys.DEFAULT_RESOURCE) else f"{resource}#"
        stamped = 0
        left: list[str] = []  # items (resource#shard) not restamped
        cause: BaseException | None = None
        self.forget(entity_id)
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
            entity, system, levels = await gather_or_end(
                self._scope.resolver.entity_config(entity_id),
                self._scope.resolver.system_level(fresh=True),
                gather_or_end(
                    *(self._scope.resolver.resource_level(r, fresh=True) for r in resources)
                ),
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
                    await self._scope.admission.restamp(image, wanted)
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
            self.forget(entity_id)
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


def _changes_something(sets: list[str], removes: list[str]) -> str | None:
    """A condition true only when the write would change a stored value (None: always write).

    Index attributes (`GSI…`) follow the values, and `at` (when the level was last written) is
    bookkeeping, so only the values are compared.
    """
    parts = []
    for clause in sets:
        target, _, value = clause.partition(" = ")
        if not target.startswith("GSI") and target != "#at":
            parts.append(f"attribute_not_exists({target}) OR {target} <> {value}")
    parts += [f"attribute_exists({target})" for target in removes if not target.startswith("GSI")]
    return " OR ".join(f"({part})" for part in parts) if parts else None
