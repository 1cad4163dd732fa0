"""The aggregator's settings: which usage windows it writes, how long snapshots and markers live
(read from the Lambda's environment by `AggregatorSettings.from_env`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..alerts.recorder import DEFAULT_ALERT_HOLD_SECONDS, DEFAULT_ALERT_RETENTION_DAYS
from .windows import DEFAULT_WINDOWS, WINDOW_TYPES

DEFAULT_MARKER_TTL_HOURS = 72  # longer than the stream's 24 h, so any redelivery finds its marker


def _positive(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"{name} must be a positive whole number, not {raw!r}")
    return int(raw)


def _whole(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit():
        raise ValueError(f"{name} must be a whole number of seconds, not {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class AggregatorSettings:
    """Which windows to write and how long snapshots and markers live."""

    windows: tuple[str, ...] = DEFAULT_WINDOWS
    #: Days a snapshot is kept after its window ends, per window type. A type not listed uses
    #: `default_retention_days`, else the version record's `usage_retention_days`, else 90.
    retention_days: Mapping[str, int] = field(default_factory=dict)
    default_retention_days: int | None = None
    marker_ttl_hours: int = DEFAULT_MARKER_TTL_HOURS
    #: Days a threshold alert is kept after it was crossed (docs/alerts.md).
    alert_retention_days: int = DEFAULT_ALERT_RETENTION_DAYS
    #: Seconds a crossing is held until no refund can take it back (docs/alerts.md); shorter
    #: holds are exact only if every refund of a never-kept debit lands that much sooner.
    alert_hold_seconds: int = DEFAULT_ALERT_HOLD_SECONDS

    def __post_init__(self) -> None:
        unknown = [w for w in self.windows if w not in WINDOW_TYPES]
        if unknown or not self.windows:
            raise ValueError(f"windows must be among {', '.join(WINDOW_TYPES)}, not {unknown}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AggregatorSettings:
        """`SNAPSHOT_WINDOWS` (e.g. "hourly,daily,monthly"), `USAGE_RETENTION_DAYS`,
        `USAGE_RETENTION_DAYS_HOURLY|DAILY|MONTHLY`, `AGGREGATOR_MARKER_TTL_HOURS`,
        `ALERT_RETENTION_DAYS`, `ALERT_HOLD_SECONDS` (0 allowed)."""
        env = os.environ if env is None else env
        raw_windows = env.get("SNAPSHOT_WINDOWS", "")
        chosen = tuple(w.strip() for w in raw_windows.split(",") if w.strip()) or DEFAULT_WINDOWS
        per_window: dict[str, int] = {
            w: days
            for w in WINDOW_TYPES
            if (days := _positive(env, f"USAGE_RETENTION_DAYS_{w.upper()}")) is not None
        }
        return cls(
            windows=chosen,
            retention_days=per_window,
            default_retention_days=_positive(env, "USAGE_RETENTION_DAYS"),
            marker_ttl_hours=_positive(env, "AGGREGATOR_MARKER_TTL_HOURS")
            or DEFAULT_MARKER_TTL_HOURS,
            alert_retention_days=_positive(env, "ALERT_RETENTION_DAYS")
            or DEFAULT_ALERT_RETENTION_DAYS,
            alert_hold_seconds=_whole(env, "ALERT_HOLD_SECONDS", DEFAULT_ALERT_HOLD_SECONDS),
        )
