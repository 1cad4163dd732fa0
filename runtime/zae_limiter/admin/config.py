"""Config levels: entity (per resource or `_default_`), resource defaults, system defaults."""

from __future__ import annotations

import asyncio
import base64
import json
import random
from typing import Any

from .. import audit, validation
from .. import config as cfg
from ..dynamo import keys, transport
from ..dynamo.transport import TransactionCancelled
from ..errors import RateLimiterUnavailable, ValidationError
from ..limits import Limit, check_limit_list
from ..models import AuditAction, ConfigSource, OnUnavailable
from ..resolution import system_level_from_item
from .base import AdminBase
from .gates import check_gate, limit_gates

KEEP: Any = object()  # "leave the stored flag as it is"
#: Writes of one level that collide with a concurrent change of it (TransactionConflict) are
#: sent again this many times in all; nothing of a cancelled transaction was written.
WRITE_ATTEMPTS = 16
#: The longest wait between two of those attempts (full jitter below it).
WRITE_BACKOFF_CAP_S = 1.0


def _check_disabled(value: Any) -> None:
    if value is not KEEP and value not in (True, False, "bypass", None):
        raise ValidationError("disabled", value, "use True, False, 'bypass' or None (inherit)")


def _check_cascade(value: Any) -> None:
    if value is not KEEP and value not in (True, False, None):
        raise ValidationError("cascade", value, "use True, False or None (inherit)")


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


class ConfigMixin(AdminBase):
    # --- the shared write ----------------------------------------------------------------------

    async def _write_level(
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
                    "Item": await self._audit_item(
                        action, subject, principal=principal, resource=resource, details=details
                    )
                }
            },
        ]
        if entity_id is not None:
            operations.append(self._version_bump(entity_id))
        # This process's changes of one partition go one at a time: concurrent ones would only
        # collide (TransactionConflict) and retry; other processes' are retried below.
        async with self._shared.partition_turns.turn(key["PK"]):
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    await self._transact(operations)
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

    async def _change_entity_level(
        self, entity_id: str, resource: str, principal: str | None, **changes: Any
    ) -> int:
        """One entity-level write (level, version, audit), then restamp the live buckets.
        Returns the bucket items updated."""
        await self._write_level(
            keys.entity_config(self._ns, entity_id, resource),
            subject=entity_id,
            resource=resource,
            principal=principal,
            entity_id=entity_id,
            **changes,
        )
        return await self._fanout(entity_id, resource)

    async def _change_resource_level(
        self, resource: str, principal: str | None, **changes: Any
    ) -> None:
        """One resource-level write (level, audit); other processes learn it within the TTL."""
        await self._write_level(
            keys.resource_config(self._ns, resource),
            subject=audit.resource_subject(resource),
            resource=resource,
            principal=principal,
            **changes,
        )
        self._forget(resource=resource)

    async def _gates_for(self, limits: Any, disabled: Any, cascade: Any) -> None:
        features = limit_gates(limits) if isinstance(limits, list) else []
        if disabled == "bypass":
            features.append("bypass")
        if cascade is not KEEP:
            features.append("cascade_policy")
        for feature in features:
            await check_gate(self._scope, feature)

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
        await self._gates_for(limits, disabled, cascade)
        await self._register_entity_config_resource(resource)
        await self._change_entity_level(
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
        await self._change_entity_level(
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
        await self._gates_for(limits, disabled, cascade)
        await self._change_resource_level(
            resource, principal, limits=limits, disabled=disabled, cascade=cascade
        )

    async def get_resource_defaults(self, resource: str) -> list[Limit]:
        validation.resource_name(resource)
        item = await self._store.get(keys.resource_config(self._ns, resource))
        return list(cfg.level_from_item(item).limits or ())

    async def delete_resource_defaults(self, resource: str, principal: str | None = None) -> None:
        validation.resource_name(resource)
        await self._change_resource_level(
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
        await self._gates_for(limits, KEEP, KEEP)
        await self._write_level(
            keys.system_config(self._ns),
            subject=audit.SYSTEM_SUBJECT,
            resource=None,
            limits=limits,
            on_unavailable=mode,
            principal=principal,
        )
        self._forget(resource=None)

    async def get_system_defaults(self) -> tuple[list[Limit], OnUnavailable | None]:
        level = system_level_from_item(await self._store.get(keys.system_config(self._ns)))
        return list(level.limits or ()), level.on_unavailable

    async def delete_system_defaults(self, principal: str | None = None) -> None:
        await self._write_level(
            keys.system_config(self._ns),
            subject=audit.SYSTEM_SUBJECT,
            resource=None,
            limits=None,
            on_unavailable=None,
            principal=principal,
            action=AuditAction.LIMITS_DELETED,
        )
        self._forget(resource=None)

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


def _mode(value: OnUnavailable | str | None) -> OnUnavailable | None:
    if value is None or isinstance(value, OnUnavailable):
        return value
    try:
        return OnUnavailable(value)
    except ValueError:
        raise ValidationError("on_unavailable", value, "use 'allow' or 'block'") from None
