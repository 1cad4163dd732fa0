"""Planning: compare a manifest with what is stored and list the changes (docs/manifest.md).

Pure: `Stored` (what the table holds, read by `state.read_stored`) and `Ownership` (what the
manifest managed before, read by `state.read_ownership`) go in, a `Plan` comes out. The same plan
drives `limits plan`, `limits diff` and `limits apply`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..concurrent_limits import DEFAULT_LEASE_TTL_SECONDS
from ..limits import Limit
from ..models import OnUnavailable
from ..validation import DEFAULT_RESOURCE
from .model import (
    ENTITY,
    PARENT,
    RECORD,
    RESOURCE,
    SHARDS,
    SYSTEM,
    LevelSpec,
    Manifest,
    Subject,
    SystemSpec,
)
from .table_checks import check_against_table

Action = Literal["create", "update", "delete"]
State = LevelSpec | SystemSpec | str | int | None  # a level, a system level, a parent id (None =
# none), or a bucket's shard count


@dataclass(frozen=True)
class EntityState:
    exists: bool
    parent: str | None = None


@dataclass
class Stored:
    """What the table holds for everything a plan looks at."""

    system: SystemSpec = field(default_factory=SystemSpec)
    resources: dict[str, LevelSpec] = field(default_factory=dict)
    entity_levels: dict[tuple[str, str], LevelSpec] = field(default_factory=dict)
    entities: dict[str, EntityState] = field(default_factory=dict)
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)
    custom_limits: dict[str, bool] = field(default_factory=dict)  # resource -> any entity has own
    shards: dict[tuple[str, str], int] = field(default_factory=dict)  # bucket's count, 0: none

    def entity(self, entity_id: str) -> EntityState:
        return self.entities.get(entity_id, EntityState(False))

    def level(self, entity_id: str, resource: str) -> LevelSpec:
        return self.entity_levels.get((entity_id, resource), LevelSpec())


@dataclass(frozen=True)
class Change:
    action: Action
    target: Subject
    before: State
    after: State

    @property
    def label(self) -> str:
        return self.target.label()

    def as_dict(self, *, with_before: bool = True) -> dict[str, Any]:
        out = {
            "action": self.action,
            "target": self.target.as_dict(),
            "label": self.label,
            "after": state_to_json(self.after),
        }
        if with_before:
            out["before"] = state_to_json(self.before)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        """The stored form of owed work (`before` may be left out: apply reads it afresh)."""
        target = Subject.from_dict(data["target"])
        before = state_from_json(target, data["before"]) if "before" in data else None
        return cls(data["action"], target, before, state_from_json(target, data["after"]))


@dataclass(frozen=True)
class Ownership:
    """The manifest's record in the table: what it manages, and any owed work."""

    system: bool = False
    resources: frozenset[str] = frozenset()
    entity_levels: frozenset[tuple[str, str]] = frozenset()
    parents: frozenset[str] = frozenset()
    rev: int | None = None  # None: no record yet
    pending: tuple[Change, ...] = ()
    done: int = 0
    lock_owner: str = ""
    lock_until_ms: int = 0

    @property
    def owed(self) -> tuple[Change, ...]:
        """Changes an interrupted apply started and did not confirm."""
        return self.pending[self.done :]

    def union(self, other: Ownership) -> Ownership:
        return Ownership(
            system=self.system or other.system,
            resources=self.resources | other.resources,
            entity_levels=self.entity_levels | other.entity_levels,
            parents=self.parents | other.parents,
        )


@dataclass(frozen=True)
class Plan:
    namespace: str
    changes: tuple[Change, ...]
    unchanged: int
    warnings: tuple[str, ...]
    owned: Ownership  # what the manifest manages once applied
    owed: tuple[Change, ...] = ()
    full: bool = False
    base: Ownership = field(default_factory=Ownership)  # the record this plan was made against

    @property
    def has_changes(self) -> bool:
        return bool(self.changes or self.owed)

    def counts(self) -> dict[str, int]:
        out = {"create": 0, "update": 0, "delete": 0}
        for change in self.changes:
            out[change.action] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "changes": [c.as_dict() for c in self.changes],
            "counts": self.counts(),
            "unchanged": self.unchanged,
            "owed": [c.as_dict() for c in self.owed],
            "warnings": list(self.warnings),
        }


# --- JSON forms (plan output, owed work) -------------------------------------------------------


def limit_to_manifest(limit: Limit) -> dict[str, Any]:
    """A limit in the manifest's compact form (defaults left out)."""
    data = limit.to_dict()
    if limit.concurrent:
        if data["lease_ttl_seconds"] == DEFAULT_LEASE_TTL_SECONDS:
            data.pop("lease_ttl_seconds")
    elif not limit.is_quota:
        if data.get("refill_amount") == limit.capacity:
            data.pop("refill_amount")
        period = data.pop("refill_period_seconds")
        if period != 60:
            data["refill_period"] = period
    return data


def limits_to_manifest(limits: Iterable[Limit]) -> dict[str, dict[str, Any]]:
    return {limit.name: limit_to_manifest(limit) for limit in limits}


def _limits_from_json(data: dict[str, Any] | None) -> tuple[Limit, ...] | None:
    if data is None:
        return None
    return tuple(Limit.from_dict(name, dict(fields)) for name, fields in data.items())


def state_to_json(state: State) -> Any:
    if isinstance(state, LevelSpec):
        return {
            "limits": None if state.limits is None else limits_to_manifest(state.limits),
            "disabled": state.disabled,
            "cascade": state.cascade,
        }
    if isinstance(state, SystemSpec):
        return {
            "limits": None if state.limits is None else limits_to_manifest(state.limits),
            "on_unavailable": state.on_unavailable.value if state.on_unavailable else None,
        }
    return state


def state_from_json(target: Subject, data: Any) -> State:
    if target.kind in (RESOURCE, ENTITY):
        return LevelSpec(_limits_from_json(data["limits"]), data["disabled"], data["cascade"])
    if target.kind == SHARDS:
        return int(data)
    if target.kind == SYSTEM:
        mode = data["on_unavailable"]
        return SystemSpec(_limits_from_json(data["limits"]), OnUnavailable(mode) if mode else None)
    return None if data is None else str(data)


# --- planning ------------------------------------------------------------------------------------


def _compare(target: Subject, before: Any, after: Any, full: bool) -> Change | None:
    """The change taking `before` to `after` (levels), or None when nothing differs."""
    if after.empty:
        return None if before.empty else Change("delete", target, before, after)
    if before.empty:
        return Change("create", target, before, after)
    if full or not after.same_as(before):
        return Change("update", target, before, after)
    return None


class _Changes:
    """The changes of a plan, by the phase apply runs them in, and the count left unchanged."""

    def __init__(self) -> None:
        self.unchanged = 0
        self.records: list[Change] = []
        self.clears: list[Change] = []
        self.moves: list[Change] = []
        self.levels: list[Change] = []
        self.splits: list[Change] = []

    def add(self, change: Change | None, bucket: list[Change]) -> None:
        if change is None:
            self.unchanged += 1
        else:
            bucket.append(change)

    def ordered(self) -> tuple[Change, ...]:
        return (*self.clears, *self.records, *self.moves, *self.levels, *self.splits)


def _plan_defaults(
    out: _Changes, manifest: Manifest, stored: Stored, owned_before: Ownership, full: bool
) -> None:
    """The system and resource levels."""
    if manifest.system is not None:
        out.add(_compare(Subject(SYSTEM), stored.system, manifest.system, full), out.levels)
    elif owned_before.system and not stored.system.empty:
        out.levels.append(Change("delete", Subject(SYSTEM), stored.system, SystemSpec()))
    for resource, level in manifest.resources.items():
        out.add(
            _compare(
                Subject(RESOURCE, resource=resource),
                stored.resources.get(resource, LevelSpec()),
                level,
                full,
            ),
            out.levels,
        )
    for resource in sorted(owned_before.resources - set(manifest.resources)):
        before = stored.resources.get(resource, LevelSpec())
        if not before.empty:
            out.levels.append(
                Change("delete", Subject(RESOURCE, resource=resource), before, LevelSpec())
            )


def _plan_entities(
    out: _Changes, manifest: Manifest, stored: Stored, owned_before: Ownership
) -> None:
    """Entity records and parent links (clears first, then moves in dependency order)."""
    for entity_id, spec in sorted(
        manifest.entities.items(), key=lambda kv: kv[1].manages_parent and kv[1].parent is not None
    ):
        state = stored.entity(entity_id)
        wanted = spec.parent if spec.manages_parent else None
        if not state.exists:
            out.records.append(Change("create", Subject(RECORD, entity_id), None, wanted))
            continue
        if spec.manages_parent:
            if state.parent == wanted:
                out.add(None, out.moves)
            else:
                out.add(
                    Change(
                        "update" if wanted else "delete",
                        Subject(PARENT, entity_id),
                        state.parent,
                        wanted,
                    ),
                    out.moves if wanted else out.clears,
                )
    for entity_id in sorted(owned_before.parents):
        declared = manifest.entities.get(entity_id)
        state = stored.entity(entity_id)
        if (declared is None or not declared.manages_parent) and state.exists and state.parent:
            out.clears.append(Change("delete", Subject(PARENT, entity_id), state.parent, None))
    moving = {c.target.entity for c in out.moves}
    out.moves.sort(key=lambda c: stored.entity(c.target.entity).parent not in moving)


def _plan_entity_levels(
    out: _Changes, manifest: Manifest, stored: Stored, owned_before: Ownership, full: bool
) -> set[tuple[str, str]]:
    """The entity levels; returns the (entity, resource) levels the manifest declares."""
    wanted_levels: set[tuple[str, str]] = set()
    for entity_id, spec in manifest.entities.items():
        for resource, level in spec.levels.items():
            wanted_levels.add((entity_id, resource))
            out.add(
                _compare(
                    Subject(ENTITY, entity_id, resource),
                    stored.level(entity_id, resource),
                    level,
                    full,
                ),
                out.levels,
            )
    for entity_id, resource in sorted(owned_before.entity_levels - wanted_levels):
        before = stored.level(entity_id, resource)
        if not before.empty:
            out.levels.append(
                Change("delete", Subject(ENTITY, entity_id, resource), before, LevelSpec())
            )
    return wanted_levels


def _plan_shards(out: _Changes, manifest: Manifest, stored: Stored) -> None:
    """Pre-split buckets (after their limits): a count is only ever raised, never managed back."""
    for entity_id, spec in sorted(manifest.entities.items()):
        for resource, count in sorted(spec.shards.items()):
            current = stored.shards.get((entity_id, resource), 0)
            target = Subject(SHARDS, entity_id, resource)
            out.add(
                Change("update", target, current, count) if current < count else None, out.splits
            )


def make_plan(
    manifest: Manifest, stored: Stored, owned_before: Ownership, *, full: bool = False
) -> Plan:
    """Every change that takes the table to the manifest, in the order apply runs them."""
    check_against_table(manifest, stored, owned_before)
    out = _Changes()
    _plan_defaults(out, manifest, stored, owned_before, full)
    _plan_entities(out, manifest, stored, owned_before)
    wanted_levels = _plan_entity_levels(out, manifest, stored, owned_before, full)
    _plan_shards(out, manifest, stored)
    owned = Ownership(
        system=manifest.system is not None,
        resources=frozenset(manifest.resources),
        entity_levels=frozenset(wanted_levels),
        parents=frozenset(e for e, s in manifest.entities.items() if s.manages_parent),
    )
    return Plan(
        namespace=manifest.namespace,
        changes=out.ordered(),
        unchanged=out.unchanged,
        warnings=tuple(warnings(manifest, stored)),
        owned=owned,
        owed=owned_before.owed,
        full=full,
        base=owned_before,
    )


# --- warnings (docs/manifest.md) ------------------------------------------------------------


def _cascading(manifest: Manifest, stored: Stored, resource: str) -> bool:
    level = manifest.resources.get(resource)
    if level is not None:
        return level.cascade is True
    return stored.resources.get(resource, LevelSpec()).cascade is True


def warnings(manifest: Manifest, stored: Stored) -> list[str]:
    out: list[str] = []
    for resource, level in manifest.resources.items():
        if level.cascade is not True:
            continue
        declared = any(
            spec.levels.get(where, LevelSpec()).limits is not None
            for spec in manifest.entities.values()
            for where in (resource, DEFAULT_RESOURCE)
        )
        if (
            not declared
            and not stored.custom_limits.get(resource)
            and not stored.custom_limits.get(DEFAULT_RESOURCE)
        ):
            out.append(
                f"resource {resource}: cascade is on but no entity has limits of its own for it; "
                "parents would fall back to the resource defaults and a whole organisation would "
                "get one user's allowance"
            )
    parents = set(manifest.child_parents().values()) | {
        e for e, kids in stored.children.items() if kids
    }
    for entity_id, spec in manifest.entities.items():
        default = spec.levels.get(DEFAULT_RESOURCE)
        if default is not None and default.limits is not None:
            out.append(
                f"entity {entity_id}: _default_ limits apply to every resource, budgets included"
            )
        if entity_id not in parents:
            continue
        for resource, level in spec.levels.items():
            soft = [lim.name for lim in level.limits or () if lim.soft]
            cascades = (
                any(_cascading(manifest, stored, r) for r in manifest.resources)
                if resource == DEFAULT_RESOURCE
                else _cascading(manifest, stored, resource)
            )
            if soft and cascades:
                out.append(
                    f"entity {entity_id} / {resource}: soft limit {', '.join(soft)} on a cascading "
                    "parent can never protect the shared quota"
                )
    return out
