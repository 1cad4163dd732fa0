"""Read-only reports: audit events, stored bucket state, resource-wide capacity."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from .. import audit, validation
from .. import config as cfg
from ..core import bucket
from ..core.bucket import MILLI
from ..core.ulids import is_ulid
from ..dynamo import bucket_items as items
from ..dynamo import keys
from ..errors import ValidationError
from ..models import AuditEvent, BucketState, EntityCapacity, ResourceCapacity
from ..scope import Scope

MAX_AUDIT_LIMIT = 1000


class Reports:
    """Read-only reports: audit events, stored bucket state, resource-wide capacity."""

    def __init__(self, scope: Scope) -> None:
        self._store, self._ns, self._clock = scope.store, scope.namespace_id, scope.clock

    async def get_audit_events(
        self, entity_id: str | None = None, limit: int = 100, start_event_id: str | None = None
    ) -> list[AuditEvent]:
        """Newest first: one subject's events (an entity id, `$RESOURCE:<name>`, `$SYSTEM`,
        `$NAMESPACE:<name>`), or with `entity_id=None` the namespace's recent changes, whatever
        their subject. `start_event_id` (an event id from an earlier page) is an exclusive
        cursor. Every argument is checked before any request (docs/audit.md)."""
        if entity_id is not None and (not isinstance(entity_id, str) or not entity_id):
            raise ValidationError("entity_id", entity_id, "give an entity id, or None for all")
        validation.whole_number(limit, "limit", 1, MAX_AUDIT_LIMIT)
        if start_event_id is not None and (
            not isinstance(start_event_id, str) or not is_ulid(start_event_id)
        ):
            raise ValidationError(
                "start_event_id",
                start_event_id,
                "pass the event_id of an event from an earlier page (26 characters), or None",
            )
        if entity_id is None:  # the namespace's log: one partition of the audit log index
            pk, index = keys.audit_log_index_key(self._ns), keys.GSI1
        else:
            pk, index = keys.audit_partition(self._ns, entity_id), None
        sort_key = f"{index}SK" if index else "SK"
        rows: list[dict[str, Any]] = []
        start_key: dict[str, Any] | None = None
        while len(rows) < limit:
            # strictly older than the cursor: the key range ends just below it
            page, start_key = await self._store.query(
                pk,
                index=index,
                newest_first=True,
                limit=limit - len(rows),
                sk_between=None if start_event_id is None else ("0", start_event_id),
                start_key=start_key,
            )
            rows += [r for r in page if r[sort_key] != start_event_id]
            if not start_key:
                break
        rows = rows[:limit]
        if index is not None:  # the index holds keys only
            found = await self._store.batch_get([keys.key(r["PK"], r["SK"]) for r in rows])
            rows = sorted(found, key=lambda item: str(item["event_id"]), reverse=True)
        return [audit.event_from_item(r) for r in rows]

    async def get_buckets(self, entity_id: str, resource: str | None = None) -> list[BucketState]:
        """Diagnostic: the stored state of every shard, whole units, brought to now."""
        validation.entity_id(entity_id)
        rows = await self._store.query_all(
            keys.entity_buckets_index_key(self._ns, entity_id),
            index=keys.GSI3,
            sk_prefix=f"{resource}#" if resource else None,
        )
        found = (
            await self._store.batch_get([keys.key(r["PK"], r["SK"]) for r in rows]) if rows else []
        )
        now = self._clock()
        out = []
        for raw in found:
            image = items.parse(raw)
            for stored in image.stamp.limits:
                params, state = bucket.in_force(
                    stored, image.states[stored.name], now, image.slot, since=image.written_at
                )
                view = bucket.view(params, state, now, image.slot)
                out.append(
                    BucketState(
                        entity_id=image.entity_id,
                        resource=image.resource,
                        limit_name=params.name,
                        shard_id=image.shard,
                        shard_count=image.stamp.shards,
                        tokens=view.balance // MILLI,
                        capacity=view.ceiling // MILLI,
                        refill_amount=params.shard_refill(image.slot) // MILLI,
                        refill_period_seconds=params.period_ms // 1000,
                        total_consumed=state.consumed // MILLI,
                        soft=params.soft,
                        topped_up=state.tu // MILLI,
                        window_start_ms=state.w,
                    )
                )
        return sorted(out, key=lambda b: (b.resource, b.shard_id, b.limit_name))

    async def _check_capacity_limit(self, resource: str, limit_name: str, seen: set[str]) -> None:
        """ValidationError for a limit name neither the buckets nor the defaults declare."""
        if not seen:
            defaults = cfg.level_from_item(
                await self._store.get(keys.resource_config(self._ns, resource))
            ).limits
            seen = {limit.name for limit in defaults or ()}
            if not seen or limit_name in seen:
                return  # nothing used yet: the report is rightly empty
        raise ValidationError(
            "limit_name",
            limit_name,
            f"{resource!r} has no limit of that name; its buckets and defaults declare "
            f"{sorted(seen)}",
        )

    async def get_resource_capacity(
        self, resource: str, limit_name: str, parents_only: bool = False
    ) -> ResourceCapacity:
        """Capacity and availability summed over every entity's bucket (reads every bucket)."""
        validation.resource_name(resource)
        validation.limit_name(limit_name)
        rows = await self._store.query_all(
            keys.resource_buckets_index_key(self._ns, resource), index=keys.GSI2
        )
        found = (
            await self._store.batch_get([keys.key(r["PK"], r["SK"]) for r in rows]) if rows else []
        )
        now = self._clock()
        per_entity: dict[str, list[Fraction]] = {}  # milli: ceiling, balance (summed exactly)
        declared: set[str] = set()
        for raw in found:
            image = items.parse(raw)
            declared.update(image.stamp.names)
            stored = image.stamp.params(limit_name)
            if stored is None:
                continue
            params, state = bucket.in_force(
                stored, image.states[limit_name], now, image.slot, since=image.written_at
            )
            totals = per_entity.setdefault(image.entity_id, [Fraction(0), Fraction(0)])
            totals[0] += bucket.view(params, state, now, image.slot).ceiling
            totals[1] += bucket.exact_balance(params, state, now, image.slot)
        if limit_name not in declared:
            await self._check_capacity_limit(resource, limit_name, declared)
        if parents_only:
            kids = set()
            for entity in list(per_entity):
                record = await self._store.get(keys.entity_meta(self._ns, entity))
                if record and record.get("parent_id"):
                    kids.add(entity)
            per_entity = {e: v for e, v in per_entity.items() if e not in kids}
        entities = []
        for e, (c_milli, a_milli) in sorted(per_entity.items()):
            c, a = math.floor(c_milli / MILLI), math.floor(a_milli / MILLI)
            entities.append(EntityCapacity(e, c, a, round(100 * (c - a) / c, 2) if c else 0.0))
        total_c = sum(e.capacity for e in entities)
        total_a = sum(e.available for e in entities)
        return ResourceCapacity(
            resource,
            limit_name,
            total_c,
            total_a,
            round(100 * (total_c - total_a) / total_c, 2) if total_c else 0.0,
            entities,
        )
