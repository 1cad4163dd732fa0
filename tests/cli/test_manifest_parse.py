"""Reading a manifest (docs/manifest.md): pure, no table."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from zae_limiter import Limit, OnUnavailable, ScheduleEntry
from zae_limiter.manifest import UNSET, LevelSpec, ManifestError, load_file, load_file_limits, loads
from zae_limiter.manifest.limit_parse import LIMIT_KEYS
from zae_limiter.manifest.plan import limits_to_manifest

SPEC_EXAMPLE = """
namespace: default
system:
  on_unavailable: block            # allow | block
  limits: {requests: {capacity: 1000}}
resources:
  search:
    cascade: true                  # true | false; absent = inherit
    disabled: false                # true | false | bypass; absent = inherit
    limits:
      requests: {capacity: 60}                        # 60 per minute
      units: {capacity: 10000, soft: true}
  budget:
    cascade: false
    limits:
      weekly: {capacity: 5000000, reset_schedule: [{cron: "0 0 * * 1", tz: UTC}]}
      session: {capacity: 1000000, reset_after_seconds: 18000}
entities:
  org-acme:
    resources:
      search: {limits: {units: {capacity: 1000000, refill_period: 86400}}}
  user-9:
    parent: org-acme               # optional
    resources:
      _default_: {disabled: bypass}
"""


def test_the_reference_example() -> None:
    manifest = loads(SPEC_EXAMPLE)
    assert manifest.namespace == "default"
    assert manifest.system is not None
    assert manifest.system.on_unavailable is OnUnavailable.BLOCK
    assert manifest.system.limits == (Limit.per_minute("requests", 1000),)
    search = manifest.resources["search"]
    assert search == LevelSpec(
        (Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000, soft=True)),
        disabled=False,
        cascade=True,
    )
    assert manifest.resources["budget"].limits == (
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1"),
        Limit.quota("session", 1_000_000, reset_after=timedelta(seconds=18000)),
    )
    acme = manifest.entities["org-acme"]
    assert acme.parent is UNSET and not acme.manages_parent
    assert acme.levels["search"].limits == (Limit.per_day("units", 1_000_000),)
    user = manifest.entities["user-9"]
    assert user.parent == "org-acme"
    assert user.levels["_default_"] == LevelSpec(disabled="bypass")
    assert manifest.child_parents() == {"user-9": "org-acme"}


def test_anchors_merges_and_x_keys() -> None:
    manifest = loads("""
namespace: default
x-shapes:
  free: &free
    requests: {capacity: 60}
    units: {capacity: 10000}
resources:
  a: {limits: *free}
  b:
    limits:
      <<: *free
      units: {capacity: 2000}
""")
    assert manifest.resources["a"].limits == (
        Limit.per_minute("requests", 60),
        Limit.per_minute("units", 10_000),
    )
    assert manifest.resources["b"].limits == (
        Limit.per_minute("requests", 60),
        Limit.per_minute("units", 2000),
    )


def test_limit_fields_and_schedules() -> None:
    manifest = loads("""
namespace: n
resources:
  r:
    limits:
      drip: {capacity: 100, refill_amount: 10, refill_period: 5}
      same: {capacity: 100, refill_amount: 10, refill_period_seconds: 5}
      scaled:
        capacity: 10
        schedule: [{cron: "* 9-17 * * MON-FRI", tz: Europe/Paris, scale: 2}]
      quota:
        capacity: 10
        reset_schedule: [{cron: "0 0 1 * *", tz: Europe/Paris}]
        schedule: [{cron: "* * * * SAT", tz: Europe/Paris, capacity: 20}]
        soft: true
""")
    drip, same, scaled, quota = manifest.resources["r"].limits or ()
    assert drip == Limit.custom("drip", 100, 10, 5) and same == Limit.custom("same", 100, 10, 5)
    assert scaled.schedule == (ScheduleEntry("* 9-17 * * MON-FRI", "Europe/Paris", scale=2),)
    assert quota == Limit.quota(
        "quota", 10, cron="0 0 1 * *", tz="Europe/Paris", soft=True
    ).with_schedule((ScheduleEntry("* * * * SAT", "Europe/Paris", capacity=20),))


@pytest.mark.parametrize(
    ("text", "path", "reason"),
    [
        ("resources: {}", "namespace", "required"),
        ("namespace: default\nextra: 1", "extra", "unknown top-level key"),
        ("namespace: default\nresources: {r: {limit: {}}}", "resources.r.limit", "unknown key"),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 1, burst: 2}}}}",
            "resources.r.limits.x.burst",
            "unknown key",
        ),
        (
            "namespace: default\nentities: {e: {resources: {r: {limits: {x: {capacity: 1}}, "
            "flags: 1}}}}",
            "entities.e.resources.r.flags",
            "unknown key",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 1.5}}}}",
            "resources.r.limits.x.capacity",
            "YAML integer",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: '100'}}}}",
            "resources.r.limits.x.capacity",
            "YAML integer",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 0}}}}",
            "resources.r.limits.x.capacity",
            "between 1",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {refill_amount: 5}}}}",
            "resources.r.limits.x",
            "needs a capacity",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, soft: 'yes please'}}}}",
            "resources.r.limits.x.soft",
            "true or false",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, "
            "reset_schedule: [{cron: '0 0 * *'}]}}}}",
            "resources.r.limits.x.reset_schedule[0]",
            "cron",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, "
            "reset_schedule: [{cron: '0 0 * * 1', tz: Nowhere/Land}]}}}}",
            "resources.r.limits.x.reset_schedule[0]",
            "Nowhere/Land",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, refill_amount: 5, "
            "reset_after_seconds: 60}}}}",
            "resources.r.limits.x.refill_amount",
            "never drips",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, "
            "reset_after_seconds: 60, reset_schedule: [{cron: '0 0 * * 1'}]}}}}",
            "resources.r.limits.x",
            "not both",
        ),
        (
            "namespace: default\nresources: {r: {limits: {x: {capacity: 5, refill_period: 60, "
            "reset_after_seconds: 60}}}}",
            "resources.r.limits.x.refill_period",
            "never drips",
        ),
        (
            "namespace: default\nresources: {r: {disabled: maybe}}",
            "resources.r.disabled",
            "true, false or bypass",
        ),
        (
            "namespace: default\nresources: {r: {cascade: bypass}}",
            "resources.r.cascade",
            "true or false",
        ),
        (
            "namespace: default\nsystem: {limits: {x: {capacity: 1}}, cascade: true}",
            "system.cascade",
            "never at system level",
        ),
        (
            "namespace: default\nsystem: {limits: {x: {capacity: 1}}, on_unavailable: maybe}",
            "system.on_unavailable",
            "allow or block",
        ),
        ("namespace: default\nsystem: {on_unavailable: allow}", "system", "needs limits"),
        ("namespace: default\nresources: {'9bad': {}}", "resources.9bad", "a letter first"),
        ("namespace: default\nentities: {'-bad': {}}", "entities.-bad", "a letter or digit"),
        (
            "namespace: default\nresources: {r: {limits: {}}}",
            "resources.r.limits",
            "at least one limit",
        ),
        (
            "namespace: default\nresources: {r: {limits: {wcu: {capacity: 1}}}}",
            "resources.r.limits.wcu",
            "reserved",
        ),
        ("namespace: 'a b'", "namespace", "letters"),
        ("namespace: default\nentities: {a: {parent: a}}", "entities.a.parent", "own parent"),
        (
            "namespace: default\nentities: {a: {parent: b}, b: {parent: c}}",
            "entities.a.parent",
            "only two levels",
        ),
        ("namespace: default\nresources: {_default_: {}}", "resources._default_", "a letter first"),
    ],
)
def test_errors_name_the_path(text: str, path: str, reason: str) -> None:
    with pytest.raises(ManifestError) as info:
        loads(text)
    assert info.value.path == path
    assert reason in str(info.value)
    assert str(info.value).startswith(f"{path}: ")


def test_duplicate_keys_and_bad_yaml_are_refused() -> None:
    with pytest.raises(ManifestError, match="duplicate key 'r'"):
        loads("namespace: default\nresources:\n  r: {}\n  r: {}\n")
    with pytest.raises(ManifestError, match="not valid YAML"):
        loads("namespace: [unclosed")
    with pytest.raises(ManifestError, match="empty"):
        loads("")


def test_files(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text("namespace: default\n")
    assert load_file(path).namespace == "default"
    with pytest.raises(ManifestError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")
    level = tmp_path / "level.yaml"
    level.write_text(
        "rpm: {capacity: 100}\nweekly: {capacity: 5, reset_schedule: [{cron: '0 0 * * 1'}]}\n"
    )
    assert load_file_limits(level) == (
        Limit.per_minute("rpm", 100),
        Limit.quota("weekly", 5, cron="0 0 * * 1"),
    )
    level.write_text("limits:\n  rpm: {capacity: 100}\n")
    assert load_file_limits(level) == (Limit.per_minute("rpm", 100),)


def test_concurrency_limits_in_a_manifest() -> None:
    manifest = loads(
        "namespace: default\nresources:\n  llm:\n    limits:\n"
        "      parallel: {capacity: 4, concurrent: true}\n"
        "      sessions: {capacity: 100, concurrent: true, lease_ttl_seconds: 900, soft: true}\n"
    )
    assert manifest.resources["llm"].limits == (
        Limit.concurrent("parallel", 4),
        Limit.concurrent("sessions", 100, lease_ttl=timedelta(minutes=15), soft=True),
    )
    assert limits_to_manifest(manifest.resources["llm"].limits or ()) == {
        "parallel": {"capacity": 4, "concurrent": True},
        "sessions": {"capacity": 100, "concurrent": True, "lease_ttl_seconds": 900, "soft": True},
    }


def test_every_concurrency_mistake_is_reported_with_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "limits.yaml"
    path.write_text(
        "namespace: default\nresources:\n  llm:\n    limits:\n"
        "      a: {capacity: 4, concurrent: true, lease_ttl_seconds: 0, refill_amount: 4}\n"
        "      b: {capacity: 4, concurrent: true, reset_after_seconds: 60, schedule: []}\n"
        "      c: {capacity: 4, lease_ttl_seconds: 30}\n"
        "      d: {capacity: 4, concurrent: 1, lease_ttl_seconds: 86401}\n"
    )
    with pytest.raises(ManifestError) as info:
        load_file(path)
    assert [e.located() for e in info.value.errors] == [
        f"{path}:5:42: resources.llm.limits.a.lease_ttl_seconds: must be from 1 to 86400 "
        "seconds (1 day)",
        f"{path}:5:64: resources.llm.limits.a.refill_amount: {NOT_HELD.format('refill_amount')}",
        f"{path}:6:42: resources.llm.limits.b.reset_after_seconds: "
        f"{NOT_HELD.format('reset_after_seconds')}",
        f"{path}:6:67: resources.llm.limits.b.schedule: {NOT_HELD.format('schedule')}",
        f"{path}:7:24: resources.llm.limits.c.lease_ttl_seconds: only a concurrency limit has "
        "a lease: add concurrent: true or leave it out",
        f"{path}:8:24: resources.llm.limits.d.concurrent: must be true or false, not an integer",
        f"{path}:8:39: resources.llm.limits.d.lease_ttl_seconds: only a concurrency limit has "
        "a lease: add concurrent: true or leave it out",
    ]


NOT_HELD = (
    "a concurrency limit never drips or resets (a hold comes back when its lease ends): leave "
    "{} out"
)


def test_every_problem_is_reported_at_once_with_its_line(tmp_path: Path) -> None:
    """Issue 42 item 6: a key written twice no longer hides a mistake in its first copy, and a
    limit reports each of its problems (the type errors and what the library refuses in the
    sound fields), each at `file:line:column`."""
    path = tmp_path / "limits.yaml"
    path.write_text(
        "namespace: default\n"
        "resources:\n"
        "  search:\n"
        "    limits:\n"
        "      rpm: {capacity: 10, refil_amount: 5}\n"
        "  search:\n"
        "    limits:\n"
        "      rpm: {capacity: 0, refill_amount: -1, soft: 'yes', alert_at: [50, '80']}\n"
        "      units: {capacity: 0, refill_amount: -1}\n"
    )
    with pytest.raises(ManifestError) as info:
        load_file(path)
    limit = "resources.search.limits"
    assert [e.located().split(": Invalid")[0] for e in info.value.errors] == [
        f"{path}:5:27: {limit}.rpm.refil_amount: unknown key; expected one of: "
        + ", ".join(LIMIT_KEYS),
        f"{path}:6:3: resources.search: duplicate key 'search' (first at line 3)",
        f"{path}:8:13: {limit}.rpm.capacity",
        f"{path}:8:26: {limit}.rpm.refill_amount",
        f"{path}:8:45: {limit}.rpm.soft: must be true or false, not a string",
        f"{path}:8:73: {limit}.rpm.alert_at[1]: must be a YAML integer, not a string",
        f"{path}:9:15: {limit}.units.capacity",
        f"{path}:9:28: {limit}.units.refill_amount",
    ]
