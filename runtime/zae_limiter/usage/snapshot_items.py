"""Usage snapshot items: their stored form, the transactional update that adds to one, parsing.

Pure: builds operations and parses items, sends nothing.

One item per entity x resource x window (keys: `keys.usage_snapshot`, indexes:
`keys.usage_index_attributes`). Attributes: `entity_id`, `resource`, `window_type`,
`window_start`, `window_end` (ISO-8601 UTC), `c:<limit>` net consumption in milli-units,
`k:<limit>` the part of a cascade parent's consumption that its children's calls cascaded to it
(written from the children's records; only the limits the parent counts in `c:` are reported),
`o:<limit>` writes that left a soft limit below zero, `total_events` admissions net of refunds,
`ttl` expiry (epoch seconds). Counters are top-level attributes so that one `ADD` creates or
increments each of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.bucket import MILLI
from ..core.times import iso_seconds
from ..dynamo import keys
from ..models import UsageSnapshot
from . import windows

CONSUMED_PREFIX = "c:"
CASCADED_PREFIX = "k:"
OVERDRAWN_PREFIX = "o:"


@dataclass(frozen=True, order=True)
class SnapshotKey:
    """Which snapshot a change belongs to."""

    ns: str
    entity_id: str
    resource: str
    window_type: str
    start_ms: int

    @property
    def window_start(self) -> str:
        return iso_seconds(self.start_ms)

    @property
    def item_key(self) -> dict[str, str]:
        return keys.usage_snapshot(
            self.ns, self.entity_id, self.resource, self.window_type, self.window_start
        )


@dataclass
class Counts:
    """Changes to one snapshot: consumption (milli), consumption cascaded from children (milli)
    and overdrawn writes per limit, admissions."""

    consumed: dict[str, int] = field(default_factory=dict)
    overdrawn: dict[str, int] = field(default_factory=dict)
    events: int = 0
    cascaded: dict[str, int] = field(default_factory=dict)

    def add(self, other: Counts) -> None:
        """Add `other`; a counter that sums to zero is dropped (it changes nothing)."""
        for mine, theirs in (
            (self.consumed, other.consumed),
            (self.overdrawn, other.overdrawn),
            (self.cascaded, other.cascaded),
        ):
            for name, amount in theirs.items():
                total = mine.get(name, 0) + amount
                if total:
                    mine[name] = total
                else:
                    mine.pop(name, None)
        self.events += other.events

    @property
    def empty(self) -> bool:
        return not self.consumed and not self.overdrawn and not self.events and not self.cascaded


def added_counters(counts: Counts) -> dict[str, int]:
    """The snapshot's attributes `counts` adds to (an `ADD` each)."""
    added: dict[str, int] = {"total_events": counts.events}
    added |= {CONSUMED_PREFIX + name: amount for name, amount in sorted(counts.consumed.items())}
    added |= {OVERDRAWN_PREFIX + name: n for name, n in sorted(counts.overdrawn.items())}
    added |= {CASCADED_PREFIX + name: n for name, n in sorted(counts.cascaded.items())}
    return added


def update_operation(key: SnapshotKey, counts: Counts, ttl_s: int) -> dict[str, Any]:
    """A TransactWriteItems `Update` (plain values) that adds `counts` to the snapshot."""
    _, end_ms = windows.bounds(key.start_ms, key.window_type)
    fixed: dict[str, Any] = {
        "entity_id": key.entity_id,
        "resource": key.resource,
        "window_type": key.window_type,
        "window_start": key.window_start,
        "window_end": iso_seconds(end_ms),
        "ttl": ttl_s,
        **keys.usage_index_attributes(
            key.ns, key.entity_id, key.resource, key.window_type, key.window_start
        ),
    }
    added = added_counters(counts)
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    clauses: dict[str, list[str]] = {"SET": [], "ADD": []}
    for tag, clause, attributes in (("s", "SET", fixed), ("d", "ADD", added)):
        for i, (attribute, value) in enumerate(attributes.items()):
            names[f"#{tag}{i}"] = attribute
            values[f":{tag}{i}"] = value
            joiner = " = " if clause == "SET" else " "
            clauses[clause].append(f"#{tag}{i}{joiner}:{tag}{i}")
    return {
        "Update": {
            "Key": key.item_key,
            "UpdateExpression": " ".join(f"{c} {', '.join(parts)}" for c, parts in clauses.items()),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
    }


def whole(milli: int) -> int:
    """Milli-units -> whole units (floor)."""
    return milli // MILLI


@dataclass(frozen=True)
class StoredSnapshot:
    """A snapshot item as read: the public view, its exact milli counters, its expiry."""

    snapshot: UsageSnapshot
    consumed_milli: dict[str, int]
    ttl: int | None
    cascaded_milli: dict[str, int] = field(default_factory=dict)

    def expired(self, now_ms: int) -> bool:
        return self.ttl is not None and self.ttl * 1000 <= now_ms

    @property
    def own_milli(self) -> dict[str, int]:
        """Consumption debited by this entity's own calls (its counters less what cascaded in)."""
        own = {n: v - self.cascaded_milli.get(n, 0) for n, v in self.consumed_milli.items()}
        return {n: v for n, v in own.items() if v}

    @property
    def counts_nothing(self) -> bool:
        """Every counter is zero: the calls it saw debited nothing in the end."""
        view = self.snapshot
        return (
            not any(self.consumed_milli.values())
            and not view.total_events
            and not any(view.overdrawn.values())
        )


def _prefixed(item: dict[str, Any], prefix: str) -> dict[str, int]:
    return {
        name[len(prefix) :]: int(value) for name, value in item.items() if name.startswith(prefix)
    }


def parse(item: dict[str, Any]) -> StoredSnapshot:
    """A snapshot item in plain form -> StoredSnapshot."""
    consumed = _prefixed(item, CONSUMED_PREFIX)
    overdrawn = _prefixed(item, OVERDRAWN_PREFIX)
    cascaded = {n: v for n, v in _prefixed(item, CASCADED_PREFIX).items() if n in consumed}
    snapshot = UsageSnapshot(
        entity_id=str(item["entity_id"]),
        resource=str(item["resource"]),
        window_start=str(item["window_start"]),
        window_end=str(item["window_end"]),
        window_type=str(item["window_type"]),
        counters={name: whole(amount) for name, amount in sorted(consumed.items())},
        total_events=int(item.get("total_events", 0)),
        overdrawn=dict(sorted(overdrawn.items())),
        cascaded={name: whole(amount) for name, amount in sorted(cascaded.items()) if amount},
    )
    ttl = item.get("ttl")
    return StoredSnapshot(snapshot, consumed, None if ttl is None else int(ttl), cascaded)
