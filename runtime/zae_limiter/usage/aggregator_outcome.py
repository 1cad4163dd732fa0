"""What one aggregator batch did (`Outcome`, Lambda's partial batch response) and the metric
points it publishes for the dashboard (`MetricPoint`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MetricPoint:
    """One value for the dashboard: name, value, unit, dimensions (never an entity)."""

    name: str
    value: float
    unit: str
    dimensions: tuple[tuple[str, str], ...]


@dataclass
class Outcome:
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
