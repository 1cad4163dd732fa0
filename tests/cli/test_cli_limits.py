"""`limits validate|plan|diff|apply|export` against DynamoDB Local (docs/manifest.md)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from cli_support import ZL
from test_cli_docs import manifest_page_blocks

from zae_limiter import Limit, OnUnavailable, RateLimiterUnavailable, Repository
from zae_limiter.dynamo import keys
from zae_limiter.manifest import (
    ConcurrentApplyError,
    ManifestError,
    apply_manifest,
    apply_plan,
    loads,
    plan_manifest,
    read_ownership,
)
from zae_limiter.manifest.state import lock

FREE = [Limit.per_minute("requests", 60), Limit.per_minute("units", 10_000)]
ORG = [Limit.per_day("units", 1_000_000)]


def write(tmp_path: Path, text: str, name: str = "limits.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture
def seed(tmp_path: Path) -> str:
    """The seed page's manifest, as docs/manifest.md shows it (the two are compared where the
    spec is: test_cli_docs.py)."""
    return write(tmp_path, manifest_page_blocks()[0])


async def test_the_seed_manifest(zl: ZL, live: Repository, seed: str) -> None:
    """Acceptance: validate, plan on a fresh table, apply, plan again, read back."""
    assert "valid" in zl("limits", "validate", "-f", seed, connect=False).stdout
    first = zl("limits", "plan", "-f", seed)
    assert first.stdout.splitlines() == [
        "+ create entity org-acme",
        "+ create resource search: limits requests:60, units:10000; cascade on",
        "+ create resource translate: limits requests:60, units:10000; cascade on",
        "+ create resource summarize: limits requests:60, units:2000; cascade on",
        "+ create resource budget: limits weekly:5000000@cron(0 0 * * 1), "
        "session:1000000@after(5h); cascade off",
        "+ create entity org-acme / search: limits units:1000000/day",
        "+ create entity org-acme / translate: limits units:1000000/day",
        "+ create entity org-acme / summarize: limits units:1000000/day",
        "plan: 8 to create, 0 to update, 0 to delete; 0 unchanged",
    ]
    assert first.stderr == ""  # no warnings: the organisation has its own limits
    assert await live.list_resources_with_defaults() == []  # plan wrote nothing
    applied = zl("limits", "apply", "-f", seed, "-y")
    assert "applied: 8 created, 0 updated, 0 deleted; 0 unchanged" in applied.stdout
    assert "[8/8] + create entity org-acme / summarize" in applied.stderr  # progress
    assert zl("limits", "plan", "-f", seed).stdout.strip() == "no changes: 7 unchanged"
    assert "no drift" in zl("limits", "diff", "-f", seed).stdout

    for resource in ("search", "translate"):
        assert await live.get_resource_defaults(resource) == FREE
        assert await live.get_resource_cascade(resource) is True
    assert await live.get_resource_defaults("summarize") == [
        Limit.per_minute("requests", 60),
        Limit.per_minute("units", 2000),
    ]
    assert await live.get_resource_defaults("budget") == [
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1"),
        Limit.quota("session", 1_000_000, reset_after=timedelta(seconds=18000)),
    ]
    assert await live.get_resource_cascade("budget") is False
    for resource in ("search", "translate", "summarize"):
        assert await live.get_limits("org-acme", resource) == ORG
    assert await live.get_entity("org-acme") is not None
    again = zl("limits", "apply", "-f", seed, "-y")
    assert "applied: 0 created, 0 updated, 0 deleted; 7 unchanged" in again.stdout


async def test_json_outputs(zl: ZL, seed: str) -> None:
    assert zl.json("limits", "validate", "-f", seed)["resources"] == 4
    plan = zl.json("limits", "plan", "-f", seed)
    assert plan["counts"] == {"create": 8, "update": 0, "delete": 0}
    first = plan["changes"][1]
    assert first["target"] == {"kind": "resource", "resource": "search"}
    assert first["after"]["limits"] == {"requests": {"capacity": 60}, "units": {"capacity": 10000}}
    result = zl.json("limits", "apply", "-f", seed, "-y")
    assert result["counts"]["create"] == 8 and result["unchanged"] == 0
    diff = zl.json("limits", "diff", "-f", seed)
    assert diff["drift"] is False and diff["unchanged"] == 7
    exported = zl.json("limits", "export")
    assert exported["resources"]["summarize"]["limits"]["units"] == {"capacity": 2000}


async def test_apply_asks_first(zl: ZL, live: Repository, tmp_path: Path) -> None:
    path = write(
        tmp_path, "namespace: default\nresources: {search: {limits: {rpm: {capacity: 5}}}}\n"
    )
    declined = zl("limits", "apply", "-f", path, input="n\n", code=1)
    assert "Aborted" in declined.stderr
    assert await live.get_resource_defaults("search") == []
    zl("limits", "apply", "-f", path, input="y\n")
    assert await live.get_resource_defaults("search") == [Limit.per_minute("rpm", 5)]


async def test_ownership_deletes_only_what_the_manifest_managed(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    first = write(
        tmp_path,
        """
namespace: default
system: {limits: {rpm: {capacity: 1000}}, on_unavailable: allow}
resources:
  kept: {limits: {rpm: {capacity: 60}}}
  dropped: {disabled: true, limits: {rpm: {capacity: 60}}}
entities:
  org: {resources: {kept: {limits: {units: {capacity: 5}}}, dropped: {cascade: true}}}
""",
    )
    zl("limits", "apply", "-f", first, "-y")
    zl("resource", "set-defaults", "manual", "-l", "rpm:1")  # never managed
    zl("entity", "set-limits", "org", "-r", "manual", "-l", "rpm:2")
    second = write(
        tmp_path,
        """
namespace: default
resources:
  kept: {limits: {rpm: {capacity: 60}}}
entities:
  org: {resources: {kept: {limits: {units: {capacity: 5}}}}}
""",
        "second.yaml",
    )
    plan = zl("limits", "plan", "-f", second).stdout.splitlines()
    assert plan == [
        "- delete system defaults",
        "- delete resource dropped",
        "- delete entity org / dropped",
        "plan: 0 to create, 0 to update, 3 to delete; 2 unchanged",
    ]
    assert zl("limits", "diff", "-f", second, "-q", code=3).stdout.startswith("drift: 3")
    zl("limits", "apply", "-f", second, "-y")
    assert await live.get_system_defaults() == ([], None)
    assert await live.get_resource_defaults("dropped") == []
    assert await live.get_resource_disabled("dropped") is None
    assert await live.get_entity_cascade("org", "dropped") is None
    assert await live.get_resource_defaults("manual") == [Limit.per_minute("rpm", 1)]
    assert await live.get_limits("org", "manual") == [Limit.per_minute("rpm", 2)]
    assert await live.get_resource_defaults("kept") == [Limit.per_minute("rpm", 60)]
    assert zl("limits", "plan", "-f", second).stdout.strip() == "no changes: 2 unchanged"
    assert (await read_ownership(live)).resources == frozenset({"kept"})


async def test_parents_are_created_moved_and_cleared(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    zl("entity", "create", "org-north")
    path = write(
        tmp_path,
        """
namespace: default
entities:
  org-south: {}
  user-1: {parent: org-north}
  user-2: {parent: org-south}
""",
    )
    out = zl("limits", "apply", "-f", path, "-y").stdout
    assert "+ create entity user-2 (parent org-south)" in out
    user1 = await live.get_entity("user-1")
    assert user1 is not None and user1.parent_id == "org-north"
    moved = write(
        tmp_path,
        """
namespace: default
entities:
  org-south: {}
  user-1: {parent: org-south}
  user-2: {}
""",
        "moved.yaml",
    )
    assert zl("limits", "plan", "-f", moved).stdout.splitlines()[:2] == [
        "- delete parent of user-2: org-south -> none",
        "~ update parent of user-1: org-north -> org-south",
    ]
    zl("limits", "apply", "-f", moved, "-y")
    assert [e.id for e in await live.get_children("org-south")] == ["user-1"]
    user2 = await live.get_entity("user-2")
    assert user2 is not None and user2.parent_id is None
    export = yaml.safe_load(zl("limits", "export").stdout)
    assert export["entities"]["user-1"] == {"parent": "org-south"}


async def test_checks_against_the_table_come_before_any_write(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        """
namespace: default
resources: {search: {limits: {rpm: {capacity: 60}}}}
entities: {user-1: {parent: org-ghost}}
""",
    )
    zl("limits", "validate", "-f", path, connect=False)  # offline: the table is not consulted
    stderr = zl.error("limits", "apply", "-f", path, "-y")
    assert stderr.startswith(
        f"Error: {path}:4:21: entities.user-1.parent: the parent 'org-ghost' does not"
    )
    assert await live.get_resource_defaults("search") == []
    assert await live.get_entity("user-1") is None


async def test_every_check_against_the_table_is_reported_with_its_line(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    """Issue 42 item 6: the checks that need the table report every problem, each at its
    `file:line:column` (they used to stop at the first, with no place); a pre-split that would
    give a stored concurrency limit less than one unit a shard is one of them, refused before
    any write."""
    await live.set_resource_defaults("llm", [Limit.concurrent("parallel", 2)])
    path = write(
        tmp_path,
        """namespace: default
entities:
  user-1: {parent: org-ghost}
  user-2: {parent: org-phantom}
  org-a:
    resources:
      llm: {shards: 4}
""",
    )
    stderr = zl.error("limits", "plan", "-f", path)
    assert stderr.splitlines() == [
        "Error: 3 problems in the manifest:",
        f"  {path}:3:12: entities.user-1.parent: the parent 'org-ghost' does not exist; declare "
        "it under entities or create it first",
        f"  {path}:4:12: entities.user-2.parent: the parent 'org-phantom' does not exist; "
        "declare it under entities or create it first",
        f"  {path}:7:13: entities.org-a.resources.llm.shards: splits concurrency limit "
        "'parallel' (max_in_flight=2) below one unit per shard: ask for at most 2 shards, or "
        "raise its max_in_flight to at least 4",
    ]
    assert "-N/--namespace" in zl.error("-N", "other", "limits", "plan", "-f", path)
    assert f"{path}:1:1: namespace:" in zl.error("-N", "other", "limits", "plan", "-f", path)
    assert await live.get_entity("org-a") is None


async def test_version_gates_are_checked_before_any_write(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    await live.set_version_record(aggregator_version="0.16.0")
    path = write(
        tmp_path,
        """
namespace: default
resources:
  plain: {limits: {rpm: {capacity: 60}}}
  budget: {limits: {weekly: {capacity: 5, soft: true, reset_schedule: [{cron: "0 0 * * 1"}]}}}
""",
    )
    stderr = zl.error("limits", "apply", "-f", path, "-y")
    assert "soft_limits needs an aggregator of version 0.17.0" in stderr
    assert await live.list_resources_with_defaults() == []


async def test_namespace_must_match(zl: ZL, live: Repository, tmp_path: Path) -> None:
    path = write(tmp_path, "namespace: staging\nresources: {r: {limits: {rpm: {capacity: 1}}}}\n")
    stderr = zl.error("-N", "default", "limits", "plan", "-f", path)
    assert "the manifest is for namespace 'staging' but -N/--namespace" in stderr
    assert "Namespace 'staging' is not registered" in zl.error("limits", "plan", "-f", path)
    await live.register_namespace("staging")
    zl("limits", "apply", "-f", path, "-y")
    staging = await live.namespace("staging")
    assert await staging.get_resource_defaults("r") == [Limit.per_minute("rpm", 1)]
    assert await live.get_resource_defaults("r") == []


async def test_bad_manifests(zl: ZL, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "namespace: default\nresources: {r: {limits: {rpm: {capacity: 1}, "
        "tpm: {capacity: 1, burst: 2}}}}\n",
    )
    stderr = zl.error("limits", "validate", "-f", path, connect=False)
    assert stderr.strip() == (
        f"Error: {path}:2:65: resources.r.limits.tpm.burst: unknown key; "
        "expected one of: capacity, refill_amount, refill_period, "
        "refill_period_seconds, reset_schedule, reset_after_seconds, "
        "schedule, soft, concurrent, lease_ttl_seconds, alert_at"
    )
    assert "Missing option '-f'" in zl("limits", "plan", code=2).stderr
    assert "cannot read" in zl.error("limits", "diff", "-f", str(tmp_path / "nope.yaml"))


async def test_warnings_go_to_stderr(zl: ZL, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
namespace: default
resources:
  search: {cascade: true, limits: {rpm: {capacity: 60}}}
entities:
  user-9: {resources: {_default_: {limits: {rpm: {capacity: 1}}}}}
""",
    )
    result = zl("limits", "plan", "-f", path, "-q")
    assert result.stdout.strip() == "plan: 3 to create, 0 to update, 0 to delete; 0 unchanged"
    assert "warning: entity user-9: _default_ limits apply to every resource" in result.stderr
    lonely = write(tmp_path, "namespace: default\nresources: {search: {cascade: true}}\n", "l.yaml")
    assert (
        "warning: resource search: cascade is on but no entity"
        in zl("limits", "apply", "-f", lonely, "-y").stderr
    )


async def test_full_rewrites_every_declared_level(zl: ZL, live: Repository, seed: str) -> None:
    zl("limits", "apply", "-f", seed, "-y")
    before = len(await live.get_audit_events("$RESOURCE:search"))
    out = zl("limits", "apply", "-f", seed, "-y", "--full").stdout
    assert "applied: 0 created, 7 updated, 0 deleted; 0 unchanged" in out
    # every level is sent again, but a level that already holds the same values is no change:
    # no second audit event (docs/audit.md)
    assert len(await live.get_audit_events("$RESOURCE:search")) == before
    assert zl("limits", "plan", "-f", seed).stdout.strip() == "no changes: 7 unchanged"


async def test_an_interrupted_apply_resumes(
    zl: ZL, live: Repository, seed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Repository.set_resource_defaults
    calls = {"n": 0}

    async def flaky(self: Repository, *args: object, **kwargs: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RateLimiterUnavailable("injected: DynamoDB went away")
        await original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Repository, "set_resource_defaults", flaky)
    stderr = zl.error("limits", "apply", "-f", seed, "-y")
    assert "apply stopped at change 3 of 8 (create resource translate)" in stderr
    assert "re-run `zae-limiter limits apply` to finish" in stderr
    monkeypatch.setattr(Repository, "set_resource_defaults", original)
    owed = zl("limits", "plan", "-f", seed).stdout
    assert owed.startswith("! 6 change(s) owed by an interrupted apply")
    out = zl("limits", "apply", "-f", seed, "-y").stdout
    assert "resumed 6 owed change(s)" in out
    assert zl("limits", "plan", "-f", seed).stdout.strip() == "no changes: 7 unchanged"
    assert await live.get_resource_defaults("translate") == FREE
    assert (await read_ownership(live)).pending == ()


async def test_a_second_concurrent_apply_fails_without_writing(
    zl: ZL, live: Repository, seed: str, tmp_path: Path
) -> None:
    manifest = loads(Path(seed).read_text())
    base = await read_ownership(live)
    await lock(live, base, owner="someone-else", managed=base, pending=(), now_ms=live._clock())
    assert zl("limits", "plan", "-f", seed).stdout.startswith("! an apply is running on this")
    stderr = zl.error("limits", "apply", "-f", seed, "-y")
    assert "another `limits apply` is running on this namespace now" in stderr
    assert await live.list_resources_with_defaults() == []

    other = Path(tmp_path / "other.yaml")
    other.write_text("namespace: default\nresources: {other: {limits: {rpm: {capacity: 1}}}}\n")
    stale_table = await Repository.open(table=live.table_name, endpoint_url=live.endpoint_url)
    try:
        await live._store.delete(keys.manifest_state(live.namespace_id))
        stale = await plan_manifest(stale_table, manifest)  # made before the other apply
        await apply_manifest(live, loads(other.read_text()))
        with pytest.raises(ConcurrentApplyError, match=r"(?i)re-plan"):
            await apply_plan(stale_table, manifest, stale)
    finally:
        await stale_table.close()
    assert await live.list_resources_with_defaults() == ["other"]


async def test_export_round_trips(zl: ZL, live: Repository, seed: str, tmp_path: Path) -> None:
    zl("limits", "apply", "-f", seed, "-y")
    await live.set_system_defaults([Limit.per_minute("rpm", 1000)], OnUnavailable.BLOCK)
    zl("entity", "create", "user-3", "--parent", "org-acme")
    zl("entity", "set-limits", "user-3", "-r", "search", "-l", "requests:5")
    exported = zl("limits", "export").stdout
    path = write(tmp_path, exported, "exported.yaml")
    zl("limits", "validate", "-f", path, connect=False)
    assert zl("limits", "plan", "-f", path).stdout.strip().startswith("no changes")
    document = yaml.safe_load(exported)
    assert document["system"] == {"limits": {"rpm": {"capacity": 1000}}, "on_unavailable": "block"}
    assert set(document["entities"]) == {"org-acme", "user-3"}
    slim = yaml.safe_load(zl("limits", "export", "--no-entities").stdout)
    assert "entities" not in slim and set(slim["resources"]) == {
        "search",
        "translate",
        "summarize",
        "budget",
    }
    assert "no such option" in zl("limits", "export", "--everything", code=2).stderr.lower()


async def test_a_cancelled_apply_records_its_progress_and_releases_the_lock(
    live: Repository, seed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = Repository.set_resource_defaults

    async def cancelled(self: Repository, *args: object, **kwargs: object) -> None:
        if args[0] == "summarize":
            raise asyncio.CancelledError
        await original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Repository, "set_resource_defaults", cancelled)
    manifest = loads(Path(seed).read_text())
    with pytest.raises(asyncio.CancelledError):
        await apply_manifest(live, manifest)
    record = await read_ownership(live)
    assert (record.done, len(record.owed), record.lock_until_ms) == (3, 5, 0)
    monkeypatch.setattr(Repository, "set_resource_defaults", original)
    result = await apply_manifest(live, manifest)
    assert len(result.resumed) == 5 and result.applied == ()
    assert await live.get_resource_defaults("summarize") == [
        Limit.per_minute("requests", 60),
        Limit.per_minute("units", 2000),
    ]


async def test_a_manifest_pre_splits_an_entity_bucket_and_never_lowers_it(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    path = write(
        tmp_path,
        """
namespace: default
resources: {search: {limits: {units: {capacity: 1000}}}}
entities:
  org-acme:
    resources:
      search: {shards: 8}
""",
    )
    assert zl("limits", "plan", "-f", path).stdout.splitlines()[-2:] == [
        "~ update shards of org-acme / search: no bucket -> 8",
        "plan: 2 to create, 1 to update, 0 to delete; 1 unchanged",
    ]
    zl("limits", "apply", "-f", path, "-y")
    assert {b.shard_count for b in await live.get_buckets("org-acme", "search")} == {8}
    assert zl("limits", "plan", "-f", path).stdout.strip() == "no changes: 3 unchanged"
    split = zl("entity", "set-shards", "org-acme", "-r", "search", "--count", "16")
    assert "org-acme / search: 16 shard(s)" in split.stdout
    assert zl("limits", "plan", "-f", path).stdout.strip() == "no changes: 3 unchanged"
    events = [e for e in await live.get_audit_events("org-acme") if e.action == "bucket_sharded"]
    assert sorted(e.details["shards"] for e in events) == [8, 16]
    bad = write(tmp_path, "namespace: default\nentities: {o: {resources: {s: {shards: 3}}}}\n")
    error = zl.error("limits", "validate", "-f", bad, connect=False)
    assert "entities.o.resources.s.shards: must be one of 1, 2, 4, 8, 16, 32" in error


WEEKLY_MANIFEST = """namespace: default
resources:
  budget:
    limits:
      weekly:
        capacity: 5000000
        reset_schedule: [{{cron: "{cron}", tz: {tz}}}]
"""


async def test_a_respelled_schedule_is_no_change_and_an_edit_keeps_the_spend(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    """§5.8: `0 0 * * MON` is `0 0 * * 1`; a zone edit changes the limit, never its balance."""
    from zae_limiter import RateLimiter, RateLimitExceeded

    first = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * 1", tz="Europe/Paris"))
    zl("limits", "apply", "-f", first, "-y")
    limiter = RateLimiter(live)
    async with limiter.acquire("user-1", "budget", {"weekly": 4_900_000}):
        pass
    respelled = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * MON", tz="Europe/Paris"))
    plan = zl("limits", "plan", "-f", respelled).stdout.splitlines()
    assert plan == ["no changes: 1 unchanged"]
    moved = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * MON", tz="Europe/Berlin"))
    assert "~ update resource budget" in zl("limits", "apply", "-f", moved, "-y").stdout
    assert (await limiter.available("user-1", "budget"))["weekly"] == 100_000
    with pytest.raises(RateLimitExceeded):
        async with limiter.acquire("user-1", "budget", {"weekly": 4_900_000}):
            pass


async def test_another_name_of_the_same_time_zone_is_no_change(zl: ZL, tmp_path: Path) -> None:
    """`Etc/UTC` and `UTC` (or `US/Eastern` and `America/New_York`) name one zone: no update."""
    for stored, written in (("Etc/UTC", "UTC"), ("US/Eastern", "America/New_York")):
        first = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * 1", tz=stored))
        zl("limits", "apply", "-f", first, "-y")
        again = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * 1", tz=written))
        assert zl("limits", "plan", "-f", again).stdout.splitlines() == ["no changes: 1 unchanged"]
    moved = write(tmp_path, WEEKLY_MANIFEST.format(cron="0 0 * * 1", tz="America/Chicago"))
    assert "~ update resource budget" in zl("limits", "plan", "-f", moved).stdout


TWO_MISTAKES_AND_AN_ANCHOR = """namespace: default
x-free: &free
  requests: {capacity: 60}
  units: {capacity: -5}
resources:
  search:
    limits: *free
  translate:
    limits: {requests: {capacity: 60, burst: 2}}
  budget:
    disabled: maybe
"""


EVERY_KIND_OF_MISTAKE = """namespace: default
entities:
  user-1: {parent: user-1}
resources:
  search:
    cascde: true
    limits:
      rpm: {capacity: -1}
  budget:
    disabled: maybe
    limits: {weekly: {capacity: 1}}
    limits: {weekly: {capacity: 2}}
  docs: {limits: {rpm: {capacity: 1, burts: 2, refill_amount: 1.5}}}
"""


@pytest.mark.parametrize("command", ["validate", "plan", "apply"])
async def test_no_mistake_hides_another_and_they_come_in_file_order(
    zl: ZL, tmp_path: Path, command: str
) -> None:
    """A misspelt key beside a bad limit, a key written twice, an entity declared before the
    resources: every problem, sorted by line, each at file:line:column (not `<unicode string>`)."""
    path = write(tmp_path, EVERY_KIND_OF_MISTAKE)
    stderr = zl.error("limits", command, "-f", path, *(["-y"] if command == "apply" else []))
    assert stderr.splitlines() == [
        "Error: 7 problems in the manifest:",
        f"  {path}:3:12: entities.user-1.parent: an entity cannot be its own parent",
        f"  {path}:6:5: resources.search.cascde: unknown key; expected one of: limits, cascade, "
        "disabled",
        f"  {path}:8:13: resources.search.limits.rpm.capacity: Invalid capacity -1: must be "
        "between 1 and 1000000000000000",
        f"  {path}:10:5: resources.budget.disabled: must be true, false or bypass (leave it out "
        "to inherit)",
        f"  {path}:12:5: resources.budget.limits: duplicate key 'limits' (first at line 11)",
        f"  {path}:13:38: resources.docs.limits.rpm.burts: unknown key; expected one of: "
        "capacity, refill_amount, refill_period, refill_period_seconds, reset_schedule, "
        "reset_after_seconds, schedule, soft, concurrent, lease_ttl_seconds, alert_at",
        f"  {path}:13:48: resources.docs.limits.rpm.refill_amount: must be a YAML integer, not "
        "a number",
    ]
    broken = write(tmp_path, "namespace: default\nresources: [unclosed\n")
    [line] = zl.error("limits", "validate", "-f", broken, connect=False).splitlines()
    assert line.startswith(f"Error: {broken}:3:1: not valid YAML: ")
    assert "<unicode string>" not in line


async def test_every_manifest_mistake_is_reported_with_its_file_and_line(
    zl: ZL, tmp_path: Path
) -> None:
    """All mistakes at once, each at file:line:column; one inside an anchor at the anchor's."""
    path = write(tmp_path, TWO_MISTAKES_AND_AN_ANCHOR)
    stderr = zl.error("limits", "validate", "-f", path, connect=False)
    assert stderr.splitlines()[0] == "Error: 3 problems in the manifest:"
    assert f"  {path}:4:11: resources.search.limits.units.capacity: Invalid capacity -5" in stderr
    assert f"  {path}:9:39: resources.translate.limits.requests.burst: unknown key" in stderr
    assert f"  {path}:11:5: resources.budget.disabled: must be true, false or bypass" in stderr
    with pytest.raises(ManifestError) as info:
        loads(TWO_MISTAKES_AND_AN_ANCHOR)
    assert [e.line for e in info.value.errors] == [4, 9, 11]


CONCURRENT_MANIFEST = """namespace: default
system:
  limits: {{parallel: {{capacity: 8, concurrent: true}}}}
resources:
  llm:
    limits:
      requests: {{capacity: 60}}
      parallel: {{capacity: {most}, concurrent: true, lease_ttl_seconds: {ttl}}}
entities:
  key-1:
    resources:
      llm: {{limits: {{parallel: {{capacity: 1, concurrent: true}}}}}}
"""


async def test_concurrency_limits_are_planned_applied_shown_and_exported(
    zl: ZL, live: Repository, tmp_path: Path
) -> None:
    """Every config level keeps a concurrency limit; a new lease is an update, the same one is
    no change; the level's table and the export say what it is."""
    first = write(tmp_path, CONCURRENT_MANIFEST.format(most=4, ttl=30))
    zl("limits", "apply", "-f", first, "-y")
    assert (await live.get_system_defaults())[0] == [Limit.concurrent("parallel", 8)]
    assert await live.get_resource_defaults("llm") == [
        Limit.per_minute("requests", 60),
        Limit.concurrent("parallel", 4, lease_ttl=30),
    ]
    assert await live.get_limits("key-1", resource="llm") == [Limit.concurrent("parallel", 1)]
    assert zl("limits", "plan", "-f", first).stdout.splitlines() == ["no changes: 3 unchanged"]
    longer = write(tmp_path, CONCURRENT_MANIFEST.format(most=4, ttl=120))
    plan = zl("limits", "plan", "-f", longer).stdout.splitlines()
    assert plan[0] == (
        "~ update resource llm: limits requests:60, parallel:4@concurrent(30s) -> "
        "requests:60, parallel:4@concurrent(2m)"
    )
    shown = zl("resource", "get-defaults", "llm").stdout
    assert "parallel:4@concurrent(30s)" in shown and "concurrent" in shown
    exported = yaml.safe_load(zl("limits", "export").stdout)
    assert exported["resources"]["llm"]["limits"]["parallel"] == {
        "capacity": 4,
        "concurrent": True,
        "lease_ttl_seconds": 30,
    }
    assert exported["system"]["limits"] == {"parallel": {"capacity": 8, "concurrent": True}}
