"""Result and record types (docs/getting-started.md)."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from .limits import Limit

ConfigSource = Literal["entity", "entity_default", "resource", "system"]


class OnUnavailable(enum.Enum):
    """What acquire does when DynamoDB cannot be reached."""

    ALLOW = "allow"
    BLOCK = "block"


@dataclass(frozen=True)
class Entity:
    id: str
    name: str | None = None
    parent_id: str | None = None
    cascade: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: str | None = None

    @property
    def is_parent(self) -> bool:
        """Has no parent, so it may be one."""
        return self.parent_id is None

    @property
    def is_child(self) -> bool:
        return self.parent_id is not None


@dataclass(frozen=True)
class LimitStatus:
    entity_id: str
    resource: str
    limit_name: str
    limit: Limit
    available: int
    requested: int
    exceeded: bool
    retry_after_seconds: float
    resets_at_ms: int | None = None
    max_request: int | None = None
    #: A dripping limit: seconds (when judged) until one more whole unit than `available` has
    #: dripped in; the RateLimit header's `t` (docs/integrations.md). None for other kinds.
    next_unit_seconds: float | None = None

    @property
    def deficit(self) -> int:
        return max(0, self.requested - self.available) if self.exceeded else 0

    @property
    def soft(self) -> bool:
        return self.limit.soft

    @property
    def overdrawn(self) -> bool:
        return self.limit.soft and self.available < 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "entity_id": self.entity_id,
            "resource": self.resource,
            "limit_name": self.limit_name,
            "kind": self.limit.kind,
            "capacity": self.limit.capacity,
        }
        if self.limit.concurrent:
            out["lease_ttl_seconds"] = self.limit.lease_ttl_seconds
        elif self.limit.is_quota:
            out["resets_at_ms"] = self.resets_at_ms
        else:
            out["refill_amount"] = self.limit.refill_amount
            out["refill_period_seconds"] = self.limit.refill_period_seconds
        out.update(
            {
                "available": self.available,
                "requested": self.requested,
                "exceeded": self.exceeded,
                # None: never fits (above max_request; check_availability only)
                "retry_after_seconds": (
                    None if math.isinf(self.retry_after_seconds) else self.retry_after_seconds
                ),
                "soft": self.limit.soft,
                "max_request": self.max_request,
            }
        )
        return out


@dataclass(frozen=True)
class Availability:
    entity_id: str
    resource: str
    checked_at_ms: int
    statuses: list[LimitStatus]
    bypassed: bool = False

    @property
    def _own(self) -> list[LimitStatus]:
        """The entity's own statuses (the rest are its cascade parent's)."""
        return [s for s in self.statuses if s.entity_id == self.entity_id]

    def _judged(self) -> list[LimitStatus]:
        """Statuses that can refuse the call: a bypass covers the entity's own limits only."""
        return [s for s in self.statuses if not (self.bypassed and s.entity_id == self.entity_id)]

    @property
    def allowed(self) -> bool:
        return not any(s.exceeded for s in self._judged())

    @property
    def available(self) -> dict[str, int]:
        return {s.limit_name: s.available for s in self._own}

    @property
    def needed(self) -> dict[str, int]:
        return {s.limit_name: s.requested for s in self._own if s.requested}

    @property
    def exceeded(self) -> list[str]:
        return list(dict.fromkeys(s.limit_name for s in self._judged() if s.exceeded))

    @property
    def deficit(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self._judged():
            if s.exceeded:
                out[s.limit_name] = max(out.get(s.limit_name, 0), s.deficit)
        return out

    @property
    def retry_after_seconds(self) -> float:
        """0.0 when it fits; `math.inf` when a need is above `max_request` (never fits)."""
        waits = [s.retry_after_seconds for s in self._judged() if s.exceeded]
        return max(waits) if waits else 0.0

    @property
    def limits(self) -> list[Limit]:
        return [s.limit for s in self._own]

    def status(self, name: str) -> LimitStatus:
        for s in self._own:
            if s.limit_name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class UsageSnapshot:
    entity_id: str
    resource: str
    window_start: str
    window_end: str
    window_type: str
    counters: dict[str, int]
    total_events: int
    overdrawn: dict[str, int] = field(default_factory=dict)
    #: The part of `counters` that children's calls cascaded to this (parent) entity.
    cascaded: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class UsageSummary:
    """Sum and per-snapshot mean over one window type (docs/usage.md).

    By entity, `total` is everything the entity's buckets were debited, cascaded usage included
    (`cascaded` says how much of it). By resource alone, `total` counts each debit once: a
    parent's cascaded usage is left out of `total` and reported in `cascaded` beside it.
    """

    snapshot_count: int
    total: dict[str, int]
    average: dict[str, float]
    min_window_start: str | None
    max_window_start: str | None
    window_type: str
    cascaded: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketOperationResult:
    entity_id: str
    resource: str
    shards: int
    amounts: dict[str, int]
    replayed: bool = False


@dataclass(frozen=True)
class BucketState:
    entity_id: str
    resource: str
    limit_name: str
    shard_id: int
    shard_count: int
    tokens: int
    capacity: int
    refill_amount: int
    refill_period_seconds: int
    total_consumed: int
    soft: bool
    topped_up: int
    window_start_ms: int | None


@dataclass(frozen=True)
class EntityCapacity:
    entity_id: str
    capacity: int
    available: int
    utilization_pct: float


@dataclass(frozen=True)
class ResourceCapacity:
    resource: str
    limit_name: str
    total_capacity: int
    total_available: int
    utilization_pct: float
    entities: list[EntityCapacity]


class AuditAction:
    ENTITY_CREATED = "entity_created"
    ENTITY_DELETED = "entity_deleted"
    ENTITY_PARENT_CHANGED = "entity_parent_changed"
    LIMITS_SET = "limits_set"
    LIMITS_DELETED = "limits_deleted"
    BUCKET_RESET = "bucket_reset"
    BUCKET_TOPPED_UP = "bucket_topped_up"
    BUCKET_SHARDED = "bucket_sharded"
    NAMESPACE_REGISTERED = "namespace_registered"
    NAMESPACE_DELETED = "namespace_deleted"
    NAMESPACE_RECOVERED = "namespace_recovered"
    NAMESPACE_PURGED = "namespace_purged"


@dataclass(frozen=True)
class AuditEvent:
    event_id: str
    timestamp: str
    action: str
    entity_id: str
    principal: str | None = None
    resource: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "timestamp": self.timestamp,
            "action": self.action,
            "entity_id": self.entity_id,
            "principal": self.principal,
            "resource": self.resource,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditEvent:
        return cls(
            event_id=data["event_id"],
            timestamp=data["timestamp"],
            action=data["action"],
            entity_id=data["entity_id"],
            principal=data.get("principal"),
            resource=data.get("resource"),
            details=dict(data.get("details") or {}),
        )


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    size: int = 0
    ttl_seconds: float = 0
    local_rejections: int = 0
    #: calls admitted on an unmetered resource, per resource (docs/configuration.md)
    unmetered_admissions: dict[str, int] = field(default_factory=dict)
    undecided_writes: int = 0  # writes given up with their outcome unknown (on-unavailable.md)
    #: writes planned on an item stamped too far ahead of this clock (docs/on-unavailable.md)
    skewed_items: int = 0
    # Work resolved off callers' paths after a deadline or a cancellation (on-unavailable.md):
    pending_resolutions: int = 0  # still being resolved
    resolved_after_deadline: int = 0  # ended after its caller stopped waiting
    refunded_after_deadline: int = 0  # item refunds landed for callers that had left
    abandoned_at_close: int = 0  # items left unresolved when close() gave up (one line each)
    # How lost answers were decided (docs/on-unavailable.md): by the same write sent again, or
    # (when re-sending kept failing) by a strongly consistent read of the writer's entry
    resolved_by_resend: int = 0
    resolved_by_read: int = 0
    # Overload (on-unavailable.md "Overload"):
    shed_overloaded: int = 0  # calls answered at once: not decidable before their deadline
    bucket_writes: int = 0  # bucket write requests the acquire path sent
    decided_calls: int = 0  # calls admitted or refused (429)

    @property
    def writes_per_decided_call(self) -> float:
        """`bucket_writes / decided_calls` (0.0 before any call was decided)."""
        return self.bucket_writes / self.decided_calls if self.decided_calls else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "size": self.size,
            "ttl_seconds": self.ttl_seconds,
            "local_rejections": self.local_rejections,
            "unmetered_admissions": dict(self.unmetered_admissions),
            "undecided_writes": self.undecided_writes,
            "skewed_items": self.skewed_items,
            "pending_resolutions": self.pending_resolutions,
            "resolved_after_deadline": self.resolved_after_deadline,
            "refunded_after_deadline": self.refunded_after_deadline,
            "abandoned_at_close": self.abandoned_at_close,
            "resolved_by_resend": self.resolved_by_resend,
            "resolved_by_read": self.resolved_by_read,
            "shed_overloaded": self.shed_overloaded,
            "bucket_writes": self.bucket_writes,
            "decided_calls": self.decided_calls,
            "writes_per_decided_call": self.writes_per_decided_call,
        }
