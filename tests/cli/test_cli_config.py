"""`system` and `resource` commands, global options, errors and exit codes (docs/cli.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from cli_support import ZL, limit_args

from support.tables import TableRef
from zae_limiter import Limit, OnUnavailable, RateLimiter, Repository, ScheduleEntry
from zae_limiter.cli import cli


async def test_system_defaults(zl: ZL, live: Repository) -> None:
    out = zl(
        "system",
        "set-defaults",
        *limit_args("rpm:1000", "units:5000/hour:10000"),
        "--soft",
        "units",
        "--on-unavailable",
        "allow",
    ).stdout
    assert "system defaults set: 2 limit(s)" in out
    assert await live.get_system_defaults() == (
        [Limit.per_minute("rpm", 1000), Limit.per_hour("units", 5000, 10000, soft=True)],
        OnUnavailable.ALLOW,
    )
    shown = zl("system", "get-defaults").stdout
    assert "units:5000/hour:10000" in shown and "on_unavailable: allow" in shown
    data = zl.json("system", "get-defaults")
    assert data["on_unavailable"] == "allow"
    assert [lim["spec"] for lim in data["limits"]] == ["rpm:1000", "units:5000/hour:10000"]
    assert data["limits"][1]["soft"] is True
    zl("system", "delete-defaults", input="n\n", code=1)  # declined: nothing deleted
    assert (await live.get_system_defaults())[0]
    zl("system", "delete-defaults", input="y\n")
    assert await live.get_system_defaults() == ([], None)
    assert zl.json("system", "delete-defaults", "-y") == {"deleted": True}


async def test_system_bad_input(zl: ZL) -> None:
    result = zl("system", "set-defaults", "-l", "rpm:lots", code=2)
    assert "cannot read limit 'rpm:lots'" in result.stderr
    assert "at least one -l" in zl("system", "set-defaults", code=2).stderr
    assert (
        "is not one of"
        in zl("system", "set-defaults", "-l", "rpm:1", "--on-unavailable", "maybe", code=2).stderr
    )


async def test_resource_defaults_every_limit_shape(zl: ZL, live: Repository) -> None:
    zl(
        "resource",
        "set-defaults",
        "budget",
        *limit_args(
            "weekly:5000000@cron(0 0 * * 1)",
            "month:100@cron(0 0 1 * *, Europe/Paris)",
            "session:1000000@after(5h)",
            "tok:500/10sec:2000",
        ),
        "--soft",
        "weekly",
        "--schedule",
        "tok@cron(* 9-17 * * MON-FRI, Europe/Paris):scale=2",
    )
    assert await live.get_resource_defaults("budget") == [
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True),
        Limit.quota("month", 100, cron="0 0 1 * *", tz="Europe/Paris"),
        Limit.quota("session", 1_000_000, reset_after=timedelta(hours=5)),
        Limit.custom("tok", 2000, 500, 10).with_schedule(
            (ScheduleEntry("* 9-17 * * MON-FRI", "Europe/Paris", scale=2),)
        ),
    ]
    data = zl.json("resource", "get-defaults", "budget")
    assert [x["spec"] for x in data["limits"]] == [
        "weekly:5000000@cron(0 0 * * 1)",
        "month:100@cron(0 0 1 * *, Europe/Paris)",
        "session:1000000@after(5h)",
        "tok:500/10sec:2000",
    ]
    assert (data["disabled"], data["cascade"]) == (None, None)
    assert zl.json("resource", "list") == {"resources": ["budget"]}
    assert zl("resource", "list").stdout.strip() == "budget"


async def test_resource_limits_file(zl: ZL, live: Repository, tmp_path: Path) -> None:
    path = tmp_path / "free.yaml"
    path.write_text("requests: {capacity: 60}\nunits: {capacity: 10000, soft: true}\n")
    zl("resource", "set-defaults", "search", "--limits-file", str(path))
    assert await live.get_resource_defaults("search") == [
        Limit.per_minute("requests", 60),
        Limit.per_minute("units", 10_000, soft=True),
    ]
    path.write_text("requests: {capacity: 1.5}\n")
    assert (
        "requests.capacity: must be a YAML integer"
        in zl("resource", "set-defaults", "search", "--limits-file", str(path), code=2).stderr
    )
    assert (
        "not both"
        in zl(
            "resource", "set-defaults", "search", "--limits-file", str(path), "-l", "rpm:1", code=2
        ).stderr
    )


async def test_resource_flags_and_cascade(zl: ZL, live: Repository) -> None:
    zl("resource", "set-defaults", "search", "-l", "rpm:60")
    for command, stored in (
        ("disable", True),
        ("enable", False),
        ("bypass", "bypass"),
        ("clear-disabled", None),
    ):
        data = zl.json("resource", command, "search")
        assert data["resource"] == "search" and data["items_updated"] == 0
        assert await live.get_resource_disabled("search") == stored
    assert (
        "resource search: disabled (0 item(s) updated)"
        in zl("resource", "disable", "search").stdout
    )
    zl("resource", "set-cascade", "search", "on")
    assert await live.get_resource_cascade("search") is True
    assert zl.json("resource", "set-cascade", "search", "off")["cascade"] is False
    assert await live.get_resource_cascade("search") is False
    zl("resource", "clear-cascade", "search")
    assert await live.get_resource_cascade("search") is None
    shown = zl.json("resource", "get-defaults", "search")
    assert (shown["disabled"], shown["cascade"]) == (True, None)
    assert "is not one of" in zl("resource", "set-cascade", "search", "maybe", code=2).stderr
    assert "Invalid resource '9bad'" in zl.error("resource", "disable", "9bad")


async def test_resource_delete_defaults(zl: ZL, live: Repository) -> None:
    zl("resource", "set-defaults", "search", "-l", "rpm:60")
    zl("resource", "delete-defaults", "search", code=1)  # no terminal answer: aborted
    assert await live.get_resource_defaults("search")
    assert zl.json("resource", "delete-defaults", "search", "-y")["deleted"] is True
    assert await live.get_resource_defaults("search") == []
    assert zl("resource", "list").stdout.strip() == "(none)"


async def test_resource_capacity(zl: ZL, live: Repository) -> None:
    zl("resource", "set-defaults", "search", "-l", "rpm:100")
    limiter = RateLimiter(live)
    for user, amount in (("u1", 10), ("u2", 30)):
        async with limiter.acquire(user, "search", {"rpm": amount}):
            pass
    data = zl.json("resource", "capacity", "search", "-l", "rpm")
    assert (data["total_capacity"], data["limit_name"]) == (200, "rpm")
    assert 160 <= data["total_available"] < 200  # 40 taken; the real clock refills meanwhile
    assert [e["entity_id"] for e in data["entities"]] == ["u1", "u2"]
    text = zl("resource", "capacity", "search", "--limit", "rpm", "--parents-only").stdout
    assert "total capacity:  200" in text and "u2" in text
    assert "Missing option '-l'" in zl("resource", "capacity", "search", code=2).stderr


async def test_global_options_go_before_or_after_and_come_from_the_environment(
    zl: ZL, table: TableRef, live: Repository
) -> None:
    after = ["--table", table.name, "--endpoint-url", table.endpoint_url]
    zl(
        "resource",
        "set-defaults",
        "search",
        "-l",
        "rpm:7",
        *after,
        "-o",
        "json",
        "--principal",
        "ops@example.com",
        connect=False,
    )
    [event] = await live.get_audit_events("$RESOURCE:search")
    assert event.principal == "ops@example.com"
    env = {"ZAEL_TABLE": table.name, "ZAEL_ENDPOINT_URL": table.endpoint_url}
    result = zl.runner.invoke(cli, ["resource", "list", "-o", "json"], env=env)
    assert result.exit_code == 0, result.stderr
    assert '"search"' in result.stdout
    # a value after the command wins over one before it
    zl("--table", "elsewhere", "resource", "list", "--table", table.name, connect=False)
    assert zl("--version", connect=False).stdout.strip() == "zae-limiter 0.18.0"
    assert zl("resource", "list", "--version", connect=False).stdout.startswith("zae-limiter")


async def test_a_missing_table_is_an_error_never_created(
    zl: ZL, table: TableRef, ddb_client: object
) -> None:
    stderr = zl.error(
        "--table",
        "no-such-table",
        "--endpoint-url",
        table.endpoint_url,
        "resource",
        "set-defaults",
        "search",
        "-l",
        "rpm:1",
        connect=False,
    )
    assert stderr.startswith("Error: Table 'no-such-table' was not found")
    assert "cdk deploy" in stderr and "zae-limiter local up" in stderr
    tables = await ddb_client.list_tables()  # type: ignore[attr-defined]
    assert "no-such-table" not in tables["TableNames"]
    debug = zl(
        "--table",
        "no-such-table",
        "--endpoint-url",
        table.endpoint_url,
        "--debug",
        "resource",
        "list",
        code=1,
        connect=False,
    )
    assert "Traceback" in debug.stderr


async def test_unknown_namespace_is_an_error(zl: ZL) -> None:
    stderr = zl.error("-N", "nope", "resource", "list")
    assert "Namespace 'nope' is not registered" in stderr
    assert "No such command" in zl("resource", "frobnicate", code=2).stderr
