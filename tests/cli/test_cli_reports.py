"""`usage`, `audit`, `namespace`, `version`, `check`, `status` (docs/cli.md, docs/versions.md)."""

from __future__ import annotations

from cli_support import ZL

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.local.stream_runner import StreamRunner


async def test_usage_list_and_summary(zl: ZL, live: Repository) -> None:
    """Seed page: `usage summary` for an organisation's cascading resource."""
    zl("resource", "set-defaults", "search", "-l", "requests:60", "-l", "units:10000")
    zl("resource", "set-cascade", "search", "on")
    zl("entity", "create", "org-acme")
    zl("entity", "set-limits", "org-acme", "-r", "search", "-l", "units:1000000/day")
    zl("entity", "create", "user-5", "--parent", "org-acme")
    limiter = RateLimiter(live)
    for units in (100, 40):
        async with limiter.acquire("user-5", "search", {"requests": 1, "units": units}):
            pass
    async with StreamRunner.from_repository(live) as runner:
        await runner.drain()
    summary = zl.json("usage", "summary", "-e", "org-acme", "-r", "search")
    assert summary["window_type"] == "daily" and summary["total"] == {"units": 140}
    user = zl.json("usage", "summary", "--entity-id", "user-5", "--resource", "search")
    assert user["total"] == {"requests": 2, "units": 140}
    text = zl("usage", "summary", "-e", "user-5", "-w", "hourly").stdout
    assert "window:       hourly" in text and "units" in text
    listed = zl.json("usage", "list", "-e", "user-5", "-w", "hourly")
    [snapshot] = listed["snapshots"]
    assert snapshot["counters"] == {"requests": 2, "units": 140}
    assert snapshot["total_events"] == 2
    rows = zl("usage", "list", "-r", "search", "-l", "10").stdout.splitlines()
    assert rows[0].split()[:3] == ["WINDOW", "START", "WINDOW"]
    assert len(rows) == 1 + 4  # user and org, hourly and daily
    assert "(no snapshots)" in zl("usage", "list", "-e", "nobody").stdout


def test_usage_bad_input(zl: ZL) -> None:
    assert "give -e/--entity-id, -r/--resource" in zl("usage", "list", code=2).stderr
    assert "is not one of" in zl("usage", "summary", "-e", "u", "-w", "weekly", code=2).stderr
    assert "Invalid" in zl.error("usage", "list", "-e", "u", "--start", "yesterday")


async def test_audit_list(zl: ZL, live: Repository) -> None:
    zl("--principal", "ops", "entity", "create", "user-1")
    zl("--principal", "ops", "resource", "set-defaults", "search", "-l", "rpm:60")
    zl("system", "set-defaults", "-l", "rpm:1000")
    events = zl.json("audit", "list", "-e", "user-1")["events"]
    assert [(e["action"], e["principal"]) for e in events] == [("entity_created", "ops")]
    resource = zl.json("audit", "list", "--resource", "search", "-l", "5")["events"]
    assert resource[0]["action"] == "limits_set" and resource[0]["resource"] == "search"
    text = zl("audit", "list", "--system").stdout
    assert "limits_set" in text and "$SYSTEM" in text
    zl("resource", "set-defaults", "search", "-l", "rpm:61")
    newest, older = zl.json("audit", "list", "--resource", "search")["events"]
    after = zl.json(
        "audit", "list", "--resource", "search", "--start-event-id", newest["event_id"]
    )["events"]
    assert after == [older]
    assert "at most one of" in zl("audit", "list", "-e", "u", "--system", code=2).stderr


async def test_audit_list_of_a_namespace_and_of_special_subjects(zl: ZL, live: Repository) -> None:
    """Without a filter: the namespace's recent changes, every subject, newest first, paged;
    `-e` takes the subjects the docs name (`$NAMESPACE:...`, `$RESOURCE:...`, `$SYSTEM`)."""
    zl("--principal", "ops", "entity", "create", "user-1")
    zl("resource", "set-defaults", "search", "-l", "rpm:60")
    zl("system", "set-defaults", "-l", "rpm:1000")
    zl("namespace", "register", "ops")
    zl("-N", "ops", "resource", "set-defaults", "elsewhere", "-l", "rpm:1")  # another namespace
    recent = zl.json("audit", "list")["events"]
    assert [(e["action"], e["entity_id"]) for e in recent] == [
        ("namespace_registered", "$NAMESPACE:ops"),
        ("limits_set", "$SYSTEM"),
        ("limits_set", "$RESOURCE:search"),
        ("entity_created", "user-1"),
    ]
    first, second = zl.json("audit", "list", "-l", "2")["events"]
    rest = zl.json("audit", "list", "--start-event-id", second["event_id"])["events"]
    assert [first, second, *rest] == recent
    assert "limits_set" in zl("audit", "list").stdout
    [registered] = zl.json("audit", "list", "-e", "$NAMESPACE:ops")["events"]
    assert registered["action"] == "namespace_registered"
    [search] = zl.json("audit", "list", "-e", "$RESOURCE:search")["events"]
    assert search["resource"] == "search"
    assert zl.json("audit", "list", "-e", "$SYSTEM")["events"][0]["action"] == "limits_set"
    elsewhere = zl.json("-N", "ops", "audit", "list")["events"]
    assert [e["entity_id"] for e in elsewhere] == ["$RESOURCE:elsewhere"]
    assert "namespace" in zl.error("audit", "list", "-e", "$NAMESPACE:bad name")
    assert "entity_id" in zl.error("audit", "list", "-e", "$OTHER")


async def test_namespaces(zl: ZL, live: Repository) -> None:
    registered = zl.json("namespace", "register", "staging", "prod")["namespaces"]
    assert set(registered) == {"staging", "prod"}
    names = [n["name"] for n in zl.json("namespace", "list")["namespaces"]]
    assert sorted(names) == ["default", "prod", "staging"]
    shown = zl.json("namespace", "show", "staging")
    assert shown["id"] == registered["staging"] and shown["status"] == "active"
    assert "status:" in zl("namespace", "show", "prod").stdout
    zl("-N", "staging", "resource", "set-defaults", "r", "-l", "rpm:1")
    ns_id = registered["staging"]
    assert f"namespace recover {ns_id}" in zl("namespace", "delete", "staging", "-y").stdout
    assert "Namespace 'staging' is not registered" in zl.error("-N", "staging", "resource", "list")
    assert [o["id"] for o in zl.json("namespace", "orphans")["namespaces"]] == [ns_id]
    assert "staging" in zl("namespace", "orphans").stdout
    zl("namespace", "recover", ns_id)
    assert zl.json("-N", "staging", "resource", "list")["resources"] == ["r"]
    assert "is active" in zl.error("namespace", "purge", ns_id, "-y")
    zl("namespace", "delete", "staging", "-y")
    purged = zl("namespace", "purge", ns_id, "-y")
    assert "purge finished" in purged.stderr and "purged" in purged.stdout
    assert zl.json("namespace", "orphans")["namespaces"] == []
    assert "Namespace 'ghost' is not registered" in zl.error("namespace", "show", "ghost")
    assert "Invalid namespace" in zl.error("namespace", "register", "_")
    zl("namespace", "delete", "prod", code=1)  # not confirmed


async def test_version_check_status(zl: ZL, live: Repository) -> None:
    version = zl.json("version")
    assert (version["library"], version["schema"]) == ("0.18.0", "1.0.0")
    assert version["verdict"]["compatible"] is True
    assert "verdict:" in zl("version").stdout
    check = zl("check").stdout
    assert "compatible" in check and "upgrade would: change nothing" in check
    status = zl.json("status")
    assert status["reachable"] is True and status["status"] == "ACTIVE"
    assert status["stream_enabled"] is True and status["stream_view_type"] == "NEW_AND_OLD_IMAGES"
    assert "table status:" in zl("status").stdout

    await live.set_version_record(aggregator_version="0.16.0")
    older = zl.json("check")
    assert older["compatible"] is True
    # no aggregator function recorded: upgrade cannot update it, and check says so (one verdict)
    assert older["upgrade_would"] == [] and "cdk deploy" in older["upgrade_refused"]
    await live.set_version_record(schema_version="2.0.0")
    assert "incompatible" in zl("check", code=3).stdout
    assert zl.json("check", code=3)["problem"] == "schema_major"
    assert zl.json("version")["verdict"]["compatible"] is False  # reported, not failed
    assert zl.json("status")["verdict"]["compatible"] is False
    # every other command refuses an incompatible table
    assert "incompatible" in zl.error("resource", "list")


def test_version_commands_on_a_missing_table(zl: ZL) -> None:
    for command in ("version", "check", "status"):
        assert "was not found" in zl.error(
            "--table", "missing", "--endpoint-url", zl.table.endpoint_url, command, connect=False
        )


async def test_system_limits_shown_after_manifest(zl: ZL, live: Repository) -> None:
    await live.set_system_defaults([Limit.per_minute("rpm", 5)])
    assert "rpm:5" in zl("system", "get-defaults").stdout
