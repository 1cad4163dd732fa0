"""What a limits manifest declares (docs/manifest.md), as plain frozen data. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..limits import Limit, identity
from ..models import OnUnavailable
from ..validation import DEFAULT_RESOURCE

Disabled = bool | str | None  # True, False, "bypass", None (inherit)


class ManifestError(ValidationError):
    """A manifest that cannot be applied; `.path` says where (`resources.search.limits.rpm`),
    `.line` and `.column` where in the file (None when unknown). `.errors` lists every problem
    found (this one alone, or all of them, in file order, for a manifest with several)."""

    def __init__(self, path: str, reason: str, value: Any = None) -> None:
        self.path = path
        self.line: int | None = None
        self.column: int | None = None
        self.source = ""
        super().__init__(path or "manifest", value, reason)
        self.errors: list[ManifestError] = [self]
        self.args = (f"{path}: {reason}" if path else reason,)

    def located(self) -> str:
        """`file:line:column: path: reason` (as much of it as is known)."""
        spot = [p for p in (self.line, self.column if self.line else None) if p]
        where = (
            ":".join(str(p) for p in (self.source, *spot))
            if self.source
            else ", ".join(f"{k} {v}" for k, v in zip(("line", "column"), spot, strict=False))
        )
        text = f"{self.path}: {self.reason}" if self.path else self.reason
        return f"{where}: {text}" if where else text

    @classmethod
    def several(cls, errors: list[ManifestError]) -> ManifestError:
        """One error carrying every problem; its message lists them, one per line."""
        if len(errors) == 1:
            return errors[0]
        first = errors[0]
        combined = cls(first.path, first.reason, first.value)
        combined.line, combined.column, combined.source = first.line, first.column, first.source
        combined.errors = list(errors)
        combined.args = (
            f"{len(errors)} problems in the manifest:\n"
            + "\n".join(f"  {e.located()}" for e in errors),
        )
        return combined

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True)
class LevelSpec:
    """One config level as the manifest states it: limits and flags (None = none / inherit)."""

    limits: tuple[Limit, ...] | None = None
    disabled: Disabled = None
    cascade: bool | None = None

    @property
    def empty(self) -> bool:
        return self.limits is None and self.disabled is None and self.cascade is None

    def same_as(self, other: LevelSpec) -> bool:
        """Equal config: limits compared by name (declaration order does not matter)."""
        return (
            _by_name(self.limits) == _by_name(other.limits)
            and self.disabled == other.disabled
            and self.cascade == other.cascade
        )


def _by_name(limits: tuple[Limit, ...] | None) -> dict[str, tuple[Any, ...]] | None:
    return None if not limits else {limit.name: identity(limit) for limit in limits}


@dataclass(frozen=True)
class SystemSpec:
    limits: tuple[Limit, ...] | None = None
    on_unavailable: OnUnavailable | None = None

    @property
    def empty(self) -> bool:
        return self.limits is None and self.on_unavailable is None

    def same_as(self, other: SystemSpec) -> bool:
        return (
            _by_name(self.limits) == _by_name(other.limits)
            and self.on_unavailable == other.on_unavailable
        )


class _Unset:
    """`parent` not given: the entity's parent link is not managed by the manifest."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class EntitySpec:
    """An entity: its parent link (UNSET = not managed, None = no parent) and its levels."""

    parent: str | None = UNSET
    levels: dict[str, LevelSpec] = field(default_factory=dict)  # resource or _default_ -> level
    shards: dict[str, int] = field(default_factory=dict)  # resource -> at least this many shards

    @property
    def manages_parent(self) -> bool:
        return self.parent is not UNSET


@dataclass(frozen=True)
class Places:
    """Where a manifest's keys are written: its file ("" for text) and each path's (line,
    column), so that the checks against the table report `file:line` too."""

    source: str = ""
    lines: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Manifest:
    namespace: str
    system: SystemSpec | None = None
    resources: dict[str, LevelSpec] = field(default_factory=dict)
    entities: dict[str, EntitySpec] = field(default_factory=dict)
    places: Places = field(default_factory=Places, compare=False, repr=False)

    def child_parents(self) -> dict[str, str]:
        """{entity: parent} for every entity the manifest gives a parent."""
        return {
            e: spec.parent
            for e, spec in self.entities.items()
            if spec.manages_parent and spec.parent is not None
        }


# --- addressing levels -------------------------------------------------------------------------

SYSTEM = "system"
RESOURCE = "resource"
ENTITY = "entity"
PARENT = "parent"
RECORD = "record"
SHARDS = "shards"


@dataclass(frozen=True, order=True)
class Subject:
    """What a change is about: the system level, a resource level, an entity level, an entity's
    parent link or an entity record."""

    kind: str
    entity: str = ""
    resource: str = ""

    def label(self) -> str:
        if self.kind == SYSTEM:
            return "system defaults"
        if self.kind == RESOURCE:
            return f"resource {self.resource}"
        if self.kind == ENTITY:
            where = "all resources" if self.resource == DEFAULT_RESOURCE else self.resource
            return f"entity {self.entity} / {where}"
        if self.kind == PARENT:
            return f"parent of {self.entity}"
        if self.kind == SHARDS:
            return f"shards of {self.entity} / {self.resource}"
        return f"entity {self.entity}"

    def as_dict(self) -> dict[str, str]:
        out = {"kind": self.kind}
        if self.entity:
            out["entity_id"] = self.entity
        if self.resource:
            out["resource"] = self.resource
        return out

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Subject:
        return cls(data["kind"], data.get("entity_id", ""), data.get("resource", ""))
