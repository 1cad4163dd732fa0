"""Configuration levels and their resolution (docs/configuration.md). Pure, no I/O.

Limits: entity+resource, entity `_default_`, resource defaults, system defaults; the first level
with limits supplies the whole list. `disabled`: entity(resource) -> entity(_default_) ->
resource; first explicit value wins. Cascade: entity(resource) -> entity(_default_) -> resource
-> the entity's own flag -> off; an entity without a parent never cascades.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from .core import schedule
from .core.bucket import MILLI, Kind, Params
from .limits import Limit
from .models import ConfigSource, OnUnavailable
from .validation import DEFAULT_RESOURCE

Disabled = bool | str | None  # True, False, "bypass", None (inherit)


@dataclass(frozen=True)
class Level:
    """One stored config level."""

    limits: tuple[Limit, ...] | None = None
    disabled: Disabled = None
    cascade: bool | None = None
    version: int = 0
    changed_at: int = 0  # epoch ms of the level's last write (0: unknown)


@dataclass(frozen=True)
class EntityRecord:
    entity_id: str
    name: str | None
    parent_id: str | None
    cascade: bool
    metadata: dict[str, str]
    created_at: str | None


@dataclass(frozen=True)
class EntityConfig:
    """Everything stored in an entity's partition: record, levels, version."""

    record: EntityRecord | None
    levels: dict[str, Level]  # resource or _default_ -> level
    version: int


@dataclass(frozen=True)
class SystemLevel:
    limits: tuple[Limit, ...] | None = None
    on_unavailable: OnUnavailable | None = None
    version: int = 0
    changed_at: int = 0


@dataclass(frozen=True)
class Resolved:
    """The effective rules for one (entity, resource)."""

    limits: tuple[Limit, ...] | None
    source: ConfigSource | None
    disabled: str  # "", "disabled:<level>", "bypass:<level>"
    cascade: bool
    parent: str | None
    entity_version: int
    resource_version: int
    system_version: int
    changed_at: int = 0  # the latest write among the levels consulted (0: unknown)


def resolve(
    entity: EntityConfig, resource: str, resource_level: Level, system: SystemLevel
) -> Resolved:
    own = entity.levels.get(resource, Level())
    default = entity.levels.get(DEFAULT_RESOURCE, Level())
    limits: tuple[Limit, ...] | None = None
    source: ConfigSource | None = None
    for level, name in (
        (own, "entity"),
        (default, "entity_default"),
        (resource_level, "resource"),
    ):
        if level.limits is not None:
            limits, source = level.limits, name  # type: ignore[assignment]
            break
    else:
        if system.limits is not None:
            limits, source = system.limits, "system"
    disabled = ""
    for level, name in ((own, "entity"), (default, "entity_default"), (resource_level, "resource")):
        if level.disabled is None:
            continue
        if level.disabled is True:
            disabled = f"disabled:{name}"
        elif level.disabled == "bypass":
            disabled = f"bypass:{name}"
        break
    parent = entity.record.parent_id if entity.record else None
    cascade = False
    if parent:
        for choice in (own.cascade, default.cascade, resource_level.cascade):
            if choice is not None:
                cascade = choice
                break
        else:
            cascade = bool(entity.record and entity.record.cascade)
    return Resolved(
        limits=limits,
        source=source,
        disabled=disabled,
        cascade=cascade,
        parent=parent,
        entity_version=entity.version,
        resource_version=resource_level.version,
        system_version=system.version,
        changed_at=max(
            own.changed_at, default.changed_at, resource_level.changed_at, system.changed_at
        ),
    )


# --- stored forms ------------------------------------------------------------------------------


def limits_to_json(limits: tuple[Limit, ...] | list[Limit]) -> str:
    return json.dumps([{"name": lim.name, **lim.to_dict()} for lim in limits], sort_keys=True)


def limits_from_json(text: str | None) -> tuple[Limit, ...] | None:
    if text is None:
        return None
    return tuple(Limit.from_dict(d.pop("name"), d) for d in json.loads(text))


def disabled_to_item(value: Disabled) -> Any:
    return value  # bool | "bypass" | None are stored as such


def level_from_item(item: dict[str, Any] | None) -> Level:
    if item is None:
        return Level()
    cascade = item.get("cascade")
    return Level(
        limits=limits_from_json(item.get("limits")),
        disabled=item.get("disabled"),
        cascade=None if cascade is None else bool(cascade),
        version=int(item.get("ver", 0)),
        changed_at=int(item.get("at", 0)),
    )


def to_params(limit: Limit, now: int | None = None) -> Params:
    """A Limit as stamped on bucket items (milli-units, ms), its schedule entry at `now`."""
    if limit.concurrent:
        kind = Kind.CONCURRENT
    elif limit.reset_after is not None:
        kind = Kind.SESSION
    elif limit.reset_schedule:
        kind = Kind.CALENDAR
    else:
        kind = Kind.RATE
    base = Params(
        name=limit.name,
        kind=kind,
        capacity=limit.capacity * MILLI,
        refill=limit.refill_amount * MILLI,
        period_ms=limit.refill_period_seconds * 1000,
        soft=limit.soft,
        cron=";".join(f"{edge.cron}|{edge.tz}" for edge in limit.reset_schedule),
        reset_after_ms=(limit.reset_after_seconds or 0) * 1000,
        alerts=limit.alert_at,
    )
    if not limit.schedule:
        return base
    stamped = replace(
        base,
        schedule=schedule.encode([entry.to_dict() for entry in limit.schedule]),
        base=(base.capacity, base.refill, base.period_ms),
    )
    return stamped if now is None else stamped.scheduled(now)


def from_params(params: Params, *, configured: bool = False) -> Limit:
    """The undivided Limit a stamp describes: as in force (for statuses), or as configured
    (base parameters and schedule, to store or stamp again)."""
    from datetime import timedelta

    from .limits import ScheduleEntry

    if configured and params.schedule:
        base = params.base or (params.capacity, params.refill, params.period_ms)
        plain = replace(
            params,
            capacity=base[0],
            refill=base[1],
            period_ms=base[2],
            schedule="",
            base=None,
            entry=-1,
        )
        entries = tuple(ScheduleEntry.from_dict(e) for e in schedule.decode(params.schedule))
        return from_params(plain).with_schedule(entries)
    if params.kind == Kind.RATE:
        return Limit(
            params.name,
            params.capacity // MILLI,
            params.refill // MILLI,
            params.period_ms // 1000,
            soft=params.soft,
            alert_at=params.alerts,
        )
    if params.kind == Kind.CONCURRENT:
        return Limit.concurrent(
            params.name,
            params.capacity // MILLI,
            lease_ttl=params.period_ms // 1000,
            soft=params.soft,
            alert_at=params.alerts,
        )
    if params.kind == Kind.CALENDAR:
        edges = (edge.split("|", 1) for edge in params.cron.split(";"))
        return Limit(
            params.name,
            params.capacity // MILLI,
            0,
            60,
            reset_schedule=tuple(ScheduleEntry.reset(expr, tz) for expr, tz in edges),
            soft=params.soft,
            alert_at=params.alerts,
        )
    return Limit(
        params.name,
        params.capacity // MILLI,
        0,
        max(1, params.reset_after_ms // 1000),
        reset_after=timedelta(milliseconds=params.reset_after_ms),
        soft=params.soft,
        alert_at=params.alerts,
    )
