"""Operator-facing wording (issue 21, item 7): each refusal says what to fix and exits 1; the
audit table says what each flag change was, and a repeated flag change writes no second event."""

from __future__ import annotations

from cli_support import ZL, limit_args


async def test_flag_changes_are_audited_once_with_what_they_changed(zl: ZL) -> None:
    zl("resource", "set-defaults", "search", *limit_args("requests:60/min"))
    zl("entity", "create", "user-1")
    zl("entity", "disable", "user-1", "-r", "search")
    zl("entity", "disable", "user-1", "-r", "search")  # already disabled: nothing new
    zl("entity", "bypass", "user-1", "-r", "search")
    events = zl.json("audit", "list", "-e", "user-1")["events"]
    kinds = [(e["action"], e["details"].get("kind"), e["details"].get("disabled")) for e in events]
    assert kinds == [
        ("limits_set", "disabled", "bypass"),
        ("limits_set", "disabled", True),
        ("entity_created", None, None),
    ]
    text = zl("audit", "list", "-e", "user-1").stdout
    assert "disabled: bypass" in text and "disabled: disabled" in text
    zl("resource", "set-cascade", "search", "on")
    assert "cascade: on" in zl("audit", "list", "--resource", "search").stdout
    assert "Invalid entity_id 'bad id'" in zl.error("audit", "list", "-e", "bad id")


async def test_limit_spec_mistakes_say_what_to_write(zl: ZL) -> None:
    for spec, expected in (
        ("rpm:-5", "the rate '-5' in 'rpm:-5' must be a whole number of at least 1"),
        ("rpm:1.5", "the rate '1.5' in 'rpm:1.5' must be a whole number of at least 1"),
        ("session:5@after(0s)", "the session length in 'session:5@after(0s)' is 0s; use 1s"),
        ("weekly:5@cron(0 0 * * 1, Europe/Pariss)", "Invalid schedule tz 'Europe/Pariss'"),
    ):
        error = zl.error("resource", "set-defaults", "search", "-l", spec, code=2)
        assert expected in error, (spec, error)
        assert "datetime.timedelta" not in error


async def test_capacity_of_an_undeclared_limit_is_refused(zl: ZL) -> None:
    zl("resource", "set-defaults", "search", *limit_args("requests:60/min"))
    error = zl.error("resource", "capacity", "search", "-l", "nosuch")
    assert "'search' has no limit of that name" in error and "['requests']" in error
    assert "total capacity" in zl("resource", "capacity", "search", "-l", "requests").stdout


async def test_a_top_up_of_a_misspelt_resource_blames_the_resource(zl: ZL) -> None:
    zl("resource", "set-defaults", "budget", *limit_args("units:1000/hour"))
    zl("entity", "create", "user-1")
    error = zl.error("entity", "top-up", "user-1", "-r", "budgte", "-a", "units:5")
    assert "resource 'budgte' has no limits for 'user-1'" in error, error
    assert "declares []" not in error
    assert "zae-limiter resource list" in error or "set-defaults" in error, error
