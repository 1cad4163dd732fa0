"""What one aggregator batch did (`BatchResult`, Lambda's partial batch response) and the metric
points it publishes for the dashboard (`MetricPoint`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .snapshot_items import whole

if TYPE_CHECKING:
    from .records import BucketChange


@dataclass(frozen=True)
class MetricPoint:
    """One value for the dashboard: name, value, unit, dimensions (never an entity)."""

    name: str
    value: float
    unit: str
    dimensions: tuple[tuple[str, str], ...]


@dataclass
class BatchResult:
    """What one batch did. `failures` maps a record's position in the batch to its error."""

    total: int
    sequence_numbers: dict[int, str | None] = field(default_factory=dict)
    failures: dict[int, BaseException] = field(default_factory=dict)
    applied: int = 0  # records whose changes were written by this call
    duplicates: int = 0  # records already applied by an earlier delivery
    archived: int = 0
    ignored: int = 0  # records that count nothing
    alerts_stored: int = 0  # threshold alerts stored by this call (docs/alerts.md)
    alerts_published: int = 0
    metrics: list[MetricPoint] = field(default_factory=list)

    def batch_item_failures(self) -> list[dict[str, str]]:
        """Lambda's partial batch response items, in batch order."""
        return [
            {"itemIdentifier": self.sequence_numbers.get(pos) or ""}
            for pos in sorted(self.failures)
        ]

    def response(self) -> dict[str, list[dict[str, str]]]:
        return {"batchItemFailures": self.batch_item_failures()}


def metric_points(
    changes: Sequence[BucketChange], names: Mapping[str, str], now: int
) -> list[MetricPoint]:
    """A batch's dashboard points: consumption, overdrawn and admissions per namespace (by
    `names`), resource and limit, and the processing lag of its oldest change."""
    consumed: Counter[tuple[str, ...]] = Counter()
    overdrawn: Counter[tuple[str, ...]] = Counter()
    admissions: Counter[tuple[str, ...]] = Counter()
    for change in changes:
        ns = names.get(change.ns, change.ns)
        resource, counts = change.resource, change.counts
        consumed.update({(ns, resource, name): v for name, v in counts.consumed.items()})
        overdrawn.update({(ns, resource, name): v for name, v in counts.overdrawn.items()})
        admissions.update({(ns, resource): counts.events})
    points = [MetricPoint("Consumed", whole(v), "Count", _dims(k)) for k, v in consumed.items()]
    points += [MetricPoint("Overdrawn", v, "Count", _dims(k)) for k, v in overdrawn.items()]
    points += [MetricPoint("Admissions", v, "Count", _dims(k)) for k, v in admissions.items()]
    if changes:
        lag = max(0, now - min(change.event_ms for change in changes))
        points.append(MetricPoint("ProcessingLagMs", lag, "Milliseconds", ()))
    return points


def _dims(key: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    return tuple(zip(("namespace", "resource", "limit"), key, strict=False))
