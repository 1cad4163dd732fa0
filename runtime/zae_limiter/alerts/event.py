"""`AlertEvent` and its stored form: one item per (entity, resource, limit, period, threshold)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from ..core.bucket import MILLI
from ..core.times import iso_seconds
from ..dynamo import keys

#: `pub` of an alert still to be published (absent: nobody publishes it, e.g. no bus configured).
UNPUBLISHED = 0
PUBLISHED = 1


@dataclass(frozen=True)
class AlertEvent:
    """One threshold crossing (docs/alerts.md).

    `threshold` is a percent of `capacity`; `used` is how much of the capacity was in use right
    after the crossing write, or after the refund that kept the crossing on debits that stayed
    (`crossed_at`, its time; docs/alerts.md), above `capacity` for an overdrawn soft limit.
    `period_start` is the quota period (calendar edge or session start) or, for a rate limit,
    the start of the refill period the crossing fell in; times are ISO-8601 UTC. `alert_id` is
    stable: the same crossing always has the same id, so consumers can drop a repeated delivery.
    `rearm` is how many top-ups and resets the bucket had at the crossing (0 before any): a
    threshold crossed again in one period after a top-up or reset has a higher `rearm` and
    another `alert_id`.
    """

    alert_id: str
    entity_id: str
    resource: str
    limit_name: str
    threshold: int
    period_start: str
    crossed_at: str
    used: int
    capacity: int
    soft: bool = False
    rearm: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AlertEvent:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Crossing:
    """A crossing as the aggregator detects it (milli-units, epoch ms)."""

    ns: str
    entity_id: str
    resource: str
    limit: str
    threshold: int
    period_ms: int
    crossed_ms: int
    used_milli: int
    capacity_milli: int
    soft: bool
    rearm: int = 0  # the bucket's top-ups and resets so far: part of the crossing's identity

    @property
    def key(self) -> dict[str, str]:
        return keys.alert_item(
            self.ns,
            self.entity_id,
            self.resource,
            self.limit,
            self.period_ms,
            self.threshold,
            self.rearm,
        )

    @property
    def alert_id(self) -> str:
        parts: tuple[object, ...] = (
            *(self.ns, self.entity_id, self.resource, self.limit, self.period_ms, self.threshold),
            *((self.rearm,) if self.rearm else ()),  # 0: the id alerts had before re-arming
        )
        text = "|".join(str(part) for part in parts)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def event(self) -> AlertEvent:
        return AlertEvent(
            alert_id=self.alert_id,
            entity_id=self.entity_id,
            resource=self.resource,
            limit_name=self.limit,
            threshold=self.threshold,
            period_start=iso_seconds(self.period_ms),
            crossed_at=iso_seconds(self.crossed_ms),
            used=self.used_milli // MILLI,
            capacity=self.capacity_milli // MILLI,
            soft=self.soft,
            rearm=self.rearm,
        )

    def item(self, ttl: int, publish: bool, now_ms: int) -> dict[str, Any]:
        """The stored alert; with `publish`, unpublished and claimed by this writer (`claim`)."""
        key = self.key
        item: dict[str, Any] = {
            **key,
            **keys.alert_index_attributes(self.ns, self.entity_id, key["SK"], self.crossed_ms),
            **self.event().to_dict(),
            "ns": self.ns,
            "crossed_ms": self.crossed_ms,
            "ttl": ttl,
        }
        if publish:
            item["pub"] = UNPUBLISHED
            item["claim"] = now_ms
        return item


def event_from_item(item: dict[str, Any]) -> AlertEvent:
    return AlertEvent(
        alert_id=str(item["alert_id"]),
        entity_id=str(item["entity_id"]),
        resource=str(item["resource"]),
        limit_name=str(item["limit_name"]),
        threshold=int(item["threshold"]),
        period_start=str(item["period_start"]),
        crossed_at=str(item["crossed_at"]),
        used=int(item["used"]),
        capacity=int(item["capacity"]),
        soft=bool(item.get("soft", False)),
        rearm=int(item.get("rearm", 0)),
    )
