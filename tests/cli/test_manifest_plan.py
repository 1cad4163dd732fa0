"""Planning (docs/manifest.md): manifest + stored state + ownership in, changes out. Pure."""

from __future__ import annotations

import pytest

from zae_limiter import Limit, OnUnavailable
from zae_limiter.manifest import (
    Change,
    EntityState,
    LevelSpec,
    ManifestError,
    Ownership,
    Stored,
    Subject,
    SystemSpec,
    loads,
    make_plan,
)
from zae_limiter.manifest.model import ENTITY, PARENT, RECORD, RESOURCE, SYSTEM

RPM = Limit.per_minute("rpm", 60)
UNITS = Limit.per_day("units", 1_000_000)


def labels(changes: tuple[Change, ...]) -> list[str]:
    return [f"{c.action} {c.label}" for c in changes]


def test_fresh_table_creates_everything_in_order() -> None:
    manifest = loads("""
namespace: default
system: {limits: {rpm: {capacity: 60}}, on_unavailable: allow}
resources: {search: {cascade: true, limits: {rpm: {capacity: 60}}}}
entities:
  user-1: {parent: org-1, resources: {search: {disabled: bypass}}}
  org-1: {resources: {search: {limits: {units: {capacity: 1000000, refill_period: 86400}}}}}
""")
    plan = make_plan(manifest, Stored(), Ownership())
    assert labels(plan.changes) == [
        "create entity org-1",
        "create entity user-1",
        "create system defaults",
        "create resource search",
        "create entity user-1 / search",
        "create entity org-1 / search",
    ]
    assert plan.changes[1].after == "org-1"  # created with its parent
    assert plan.changes[2].after == SystemSpec((RPM,), OnUnavailable.ALLOW)
    assert plan.unchanged == 0 and plan.warnings == ()
    assert plan.owned == Ownership(
        system=True,
        resources=frozenset({"search"}),
        entity_levels=frozenset({("user-1", "search"), ("org-1", "search")}),
        parents=frozenset({"user-1"}),
    )


def test_only_differences_are_planned_and_order_of_limits_does_not_matter() -> None:
    manifest = loads("""
namespace: default
resources:
  same: {limits: {rpm: {capacity: 60}, units: {capacity: 1000000, refill_period: 86400}}}
  changed: {limits: {rpm: {capacity: 60}}}
  flags: {cascade: true, limits: {rpm: {capacity: 60}}}
""")
    stored = Stored(
        resources={
            "same": LevelSpec((UNITS, RPM)),
            "changed": LevelSpec((Limit.per_minute("rpm", 30),)),
            "flags": LevelSpec((RPM,), cascade=False),
        }
    )
    plan = make_plan(manifest, stored, Ownership())
    assert labels(plan.changes) == ["update resource changed", "update resource flags"]
    assert plan.unchanged == 1
    full = make_plan(manifest, stored, Ownership(), full=True)
    assert labels(full.changes) == [
        "update resource same",
        "update resource changed",
        "update resource flags",
    ]


def test_ownership_deletes_only_what_the_manifest_managed() -> None:
    manifest = loads("namespace: default\nresources: {kept: {limits: {rpm: {capacity: 60}}}}")
    stored = Stored(
        system=SystemSpec((RPM,)),
        resources={
            "kept": LevelSpec((RPM,)),
            "dropped": LevelSpec((RPM,), disabled=True),
            "gone": LevelSpec(),
        },
        entity_levels={
            ("org", "search"): LevelSpec((UNITS,)),
            ("api", "search"): LevelSpec((UNITS,)),
        },
        entities={"user": EntityState(True, "org"), "org": EntityState(True)},
    )
    owned = Ownership(
        system=True,
        resources=frozenset({"kept", "dropped", "gone"}),
        entity_levels=frozenset({("org", "search")}),
        parents=frozenset({"user"}),
        rev=3,
    )
    plan = make_plan(manifest, stored, owned)
    assert labels(plan.changes) == [
        "delete parent of user",
        "delete system defaults",
        "delete resource dropped",
        "delete entity org / search",
    ]  # "gone" holds nothing any more; ("api", "search") was never managed
    assert plan.owned == Ownership(resources=frozenset({"kept"}))
    assert plan.base.rev == 3


def test_parent_links_move_clear_and_check_depth() -> None:
    manifest = loads("""
namespace: default
entities:
  org-a: {parent: null}
  org-b: {}
  user-1: {parent: org-b}
  user-2: {parent: org-a}
""")
    stored = Stored(
        entities={
            "org-a": EntityState(True, "org-b"),
            "org-b": EntityState(True),
            "user-1": EntityState(True, "org-a"),
            "user-2": EntityState(True),
        },
        children={"user-1": (), "user-2": (), "org-a": ("user-1",)},
    )
    plan = make_plan(manifest, stored, Ownership())
    assert labels(plan.changes) == [
        "delete parent of org-a",
        "update parent of user-1",
        "update parent of user-2",
    ]
    assert [(c.before, c.after) for c in plan.changes] == [
        ("org-b", None),
        ("org-a", "org-b"),
        (None, "org-a"),
    ]


@pytest.mark.parametrize(
    ("text", "stored", "message"),
    [
        ("entities: {u: {parent: nobody}}", Stored(), "does not exist"),
        (
            "entities: {u: {parent: org}}",
            Stored(entities={"org": EntityState(True, "top")}),
            "has a parent itself",
        ),
        (
            "entities: {u: {parent: org}}",
            Stored(
                entities={"org": EntityState(True), "u": EntityState(True)},
                children={"u": ("kid",)},
            ),
            r"has children \(kid\)",
        ),
        (
            "entities: {u: {parent: org}, kid: {parent: u}}",
            Stored(entities={"org": EntityState(True)}),
            "has a parent itself",
        ),
    ],
)
def test_parent_errors(text: str, stored: Stored, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        make_plan(loads("namespace: default\n" + text), stored, Ownership())


def test_a_child_moved_away_by_the_manifest_frees_its_parent() -> None:
    manifest = loads("namespace: default\nentities: {u: {parent: org}, kid: {parent: null}}")
    stored = Stored(
        entities={"org": EntityState(True), "u": EntityState(True), "kid": EntityState(True, "u")},
        children={"u": ("kid",)},
    )
    plan = make_plan(manifest, stored, Ownership())
    assert labels(plan.changes) == ["delete parent of kid", "update parent of u"]


def test_warnings() -> None:
    manifest = loads("""
namespace: default
resources:
  search: {cascade: true, limits: {rpm: {capacity: 60}}}
  lonely: {cascade: true, limits: {rpm: {capacity: 60}}}
entities:
  org: {resources: {search: {limits: {units: {capacity: 5, soft: true}}}}}
  user: {parent: org, resources: {_default_: {limits: {rpm: {capacity: 1}}}}}
""")
    plan = make_plan(manifest, Stored(entities={}), Ownership())
    soft, default = plan.warnings
    assert soft.startswith("entity org / search: soft limit units on a cascading parent")
    assert default.startswith("entity user: _default_ limits apply to every resource")
    # The user's _default_ limits count as "an entity has limits of its own" for lonely too.
    no_default = loads("namespace: default\nresources: {lonely: {cascade: true}}")
    [warning] = make_plan(no_default, Stored(), Ownership()).warnings
    assert warning.startswith("resource lonely: cascade is on but no entity has limits")
    stored = Stored(custom_limits={"lonely": True})
    assert make_plan(no_default, stored, Ownership()).warnings == ()


def test_owed_work_is_reported_and_changes_round_trip() -> None:
    change = Change(
        "update",
        Subject(ENTITY, "org", "search"),
        LevelSpec((RPM,)),
        LevelSpec((UNITS,), disabled="bypass", cascade=True),
    )
    for c in (
        change,
        Change("create", Subject(SYSTEM), SystemSpec(), SystemSpec((RPM,), OnUnavailable.BLOCK)),
        Change("delete", Subject(RESOURCE, resource="r"), LevelSpec((RPM,)), LevelSpec()),
        Change("update", Subject(PARENT, "u"), "a", "b"),
        Change("create", Subject(RECORD, "u"), None, None),
    ):
        assert Change.from_dict(c.as_dict()) == c
    owned = Ownership(rev=1, pending=(change, change), done=1)
    plan = make_plan(loads("namespace: default"), Stored(), owned)
    assert plan.owed == (change,) and plan.has_changes
