"""`entity` commands (docs/cli.md), including the seed page's reference table: plans,
purchases and resets, organisations, moving a user, soft limits and bypass from the shell."""

from __future__ import annotations

from datetime import timedelta

from cli_support import ZL, limit_args

from zae_limiter import Limit, RateLimiter, Repository

WEEKLY_FREE = "weekly:5000000@cron(0 0 * * 1)"
SESSION_FREE = "session:1000000@after(5h)"


async def test_create_show_children_delete(zl: ZL, live: Repository) -> None:
    assert (
        "entity org-acme created"
        in zl("entity", "create", "org-acme", "--display-name", "Acme").stdout
    )
    data = zl.json(
        "entity",
        "create",
        "user-1",
        "--parent",
        "org-acme",
        "--cascade",
        "--meta",
        "plan=pro",
        "--meta",
        "region=eu",
    )
    assert (data["id"], data["parent_id"], data["cascade"]) == ("user-1", "org-acme", True)
    assert data["metadata"] == {"plan": "pro", "region": "eu"}
    entity = await live.get_entity("user-1")
    assert entity is not None and entity.parent_id == "org-acme"
    assert [e.id for e in await live.get_children("org-acme")] == ["user-1"]

    zl("entity", "set-limits", "org-acme", "-r", "search", "-l", "units:1000000/day")
    zl("entity", "disable", "org-acme", "-r", "translate")
    shown = zl.json("entity", "show", "org-acme")
    assert shown["entity"]["name"] == "Acme" and shown["children"] == 1
    assert shown["levels"]["search"]["limits"][0]["spec"] == "units:1000000/day"
    assert shown["levels"]["translate"] == {"limits": [], "disabled": True, "cascade": None}
    text = zl("entity", "show", "org-acme").stdout
    assert "children: 1" in text and "[translate] disabled: disabled" in text
    children = zl.json("entity", "children", "org-acme")
    assert [c["id"] for c in children["children"]] == ["user-1"]
    assert "user-1" in zl("entity", "children", "org-acme").stdout

    assert "still has children" in zl.error("entity", "delete", "org-acme", "-y")
    zl("entity", "delete", "user-1", "-y")
    assert await live.get_entity("user-1") is None
    assert zl.json("entity", "children", "org-acme") == {"parent_id": "org-acme", "children": []}


async def test_create_and_show_bad_input(zl: ZL) -> None:
    assert "KEY=VALUE" in zl("entity", "create", "u", "--meta", "novalue", code=2).stderr
    zl("entity", "create", "u")
    assert "Entity 'u' already exists" in zl.error("entity", "create", "u")
    assert "Entity 'ghost' does not exist" in zl.error("entity", "create", "v", "--parent", "ghost")
    assert "Entity 'nobody' does not exist" in zl.error("entity", "show", "nobody")
    assert "Invalid entity_id" in zl.error("entity", "create", "bad!", "--display-name", "x")


async def test_limits_at_levels_and_listing(zl: ZL, live: Repository) -> None:
    zl("entity", "set-limits", "user-2", "--all-resources", *limit_args("rpm:600", "units:100000"))
    zl(
        "entity",
        "set-limits",
        "user-2",
        "--resource",
        "budget",
        "-l",
        WEEKLY_FREE,
        "--soft",
        "weekly",
    )
    assert await live.get_limits("user-2") == [
        Limit.per_minute("rpm", 600),
        Limit.per_minute("units", 100_000),
    ]
    assert await live.get_limits("user-2", "budget") == [
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True)
    ]
    got = zl.json("entity", "get-limits", "user-2", "-r", "budget")
    assert got["limits"][0]["soft"] is True
    assert "rpm:600" in zl("entity", "get-limits", "user-2").stdout
    assert zl.json("entity", "list", "--with-custom-limits", "budget")["entities"] == ["user-2"]
    assert (
        zl("entity", "list", "--with-custom-limits", "_default_", "--limit", "1").stdout.strip()
        == "user-2"
    )
    assert zl.json("entity", "list-resources") == {"resources": ["_default_", "budget"]}
    assert "Missing option '--with-custom-limits'" in zl("entity", "list", code=2).stderr
    zl("entity", "delete-limits", "user-2", "-r", "budget", "-y")
    assert await live.get_limits("user-2", "budget") == []
    assert zl.json("entity", "delete-limits", "user-2", "-y")["deleted"] is True
    assert (
        "no limit named 'tpm'"
        in zl("entity", "set-limits", "u", "-r", "x", "-l", "rpm:1", "--soft", "tpm", code=2).stderr
    )


async def test_set_limits_names_its_level(zl: ZL, live: Repository) -> None:
    """Issue 42 item 7: without -r, set-limits used to set the entity's _default_ limits,
    which apply to every resource, budgets included. It now needs -r RESOURCE or an explicit
    --all-resources, and writes nothing otherwise."""
    zl("entity", "create", "user-5")
    missing = zl("entity", "set-limits", "user-5", "-l", "rpm:10", code=2).stderr
    assert "--all-resources" in missing and "budgets included" in missing
    both = zl(
        "entity", "set-limits", "user-5", "-r", "search", "--all-resources", "-l", "rpm:10", code=2
    )
    assert "not both" in both.stderr
    assert await live.get_limits("user-5") == []
    zl("entity", "set-limits", "user-5", "--all-resources", "-l", "rpm:10")
    assert await live.get_limits("user-5") == [Limit.per_minute("rpm", 10)]
    zl("entity", "set-limits", "user-5", "-r", "search", "-l", "rpm:20")
    assert await live.get_limits("user-5", "search") == [Limit.per_minute("rpm", 20)]


async def test_flags_and_cascade(zl: ZL, live: Repository) -> None:
    zl("entity", "create", "user-7")
    for command, stored in (
        ("disable", True),
        ("enable", False),
        ("bypass", "bypass"),
        ("clear-disabled", None),
    ):
        data = zl.json("entity", command, "user-7", "-r", "budget")
        names: dict[bool | str | None, str] = {True: "disabled", False: "enabled", None: "inherit"}
        assert data["state"] == names.get(stored, stored)
        assert await live.get_entity_disabled("user-7", "budget") == stored
    zl("entity", "bypass", "user-7")
    assert await live.get_entity_disabled("user-7", "_default_") == "bypass"
    assert "all resources: bypass" in zl("entity", "bypass", "user-7").stdout
    zl("entity", "set-cascade", "user-7", "on", "-r", "search")
    assert await live.get_entity_cascade("user-7", "search") is True
    zl("entity", "set-cascade", "user-7", "off")
    assert await live.get_entity_cascade("user-7", "_default_") is False
    assert zl.json("entity", "clear-cascade", "user-7", "-r", "search")["cascade"] is None
    assert await live.get_entity_cascade("user-7", "search") is None
    assert "is not one of" in zl("entity", "set-cascade", "user-7", "yes", code=2).stderr
    assert "Invalid resource" in zl.error("entity", "disable", "user-7", "-r", "bad name")


async def test_organisations_and_moving_a_user(zl: ZL, live: Repository) -> None:
    """Seed page: `entity create --parent`, `resource set-cascade`, `entity set-parent`."""
    zl("resource", "set-defaults", "search", *limit_args("requests:60", "units:10000"))
    zl("resource", "set-cascade", "search", "on")
    for org in ("org-north", "org-south"):
        zl("entity", "create", org)
        zl("entity", "set-limits", org, "-r", "search", "-l", "units:1000000/day")
    zl("entity", "create", "user-4", "--parent", "org-north")
    limiter = RateLimiter(live)
    async with limiter.acquire("user-4", "search", {"requests": 1, "units": 100}):
        pass
    data = zl.json("entity", "set-parent", "user-4", "--parent", "org-south")
    assert data["parent_id"] == "org-south" and data["items_updated"] >= 1
    async with limiter.acquire("user-4", "search", {"requests": 1, "units": 100}):
        pass
    north = zl.json("entity", "available", "org-north", "-r", "search")["available"]
    south = zl.json("entity", "available", "org-south", "-r", "search")["available"]
    assert north["units"] < 1_000_000 and 999_800 <= south["units"] < 1_000_000
    assert "parent none" in zl("entity", "set-parent", "user-4", "--none").stdout
    entity = await live.get_entity("user-4")
    assert entity is not None and entity.parent_id is None
    for args in ((), ("--parent", "org-south", "--none")):
        assert (
            "exactly one of --parent ID or --none"
            in zl("entity", "set-parent", "user-4", *args, code=2).stderr
        )
    assert "does not exist" in zl.error("entity", "set-parent", "user-4", "--parent", "ghost")


async def test_plans_purchases_and_resets(zl: ZL) -> None:
    """Seed page "Plans" through the CLI: upgrade, reset, purchase, session reset, downgrade."""
    zl("resource", "set-defaults", "budget", *limit_args(WEEKLY_FREE, SESSION_FREE))
    zl("entity", "create", "user-2")
    zl(
        "entity",
        "set-limits",
        "user-2",
        "-r",
        "budget",
        *limit_args("weekly:50000000@cron(0 0 * * 1)", "session:10000000@after(5h)"),
    )
    reset = zl.json("entity", "reset", "user-2", "-r", "budget")
    assert reset["shards"] == 0 or reset["amounts"]
    bought = zl.json(
        "entity",
        "top-up",
        "user-2",
        "-r",
        "budget",
        "-a",
        "weekly:20000000",
        "--idempotency-key",
        "order-1001",
    )
    assert (bought["amounts"], bought["replayed"]) == ({"weekly": 20_000_000}, False)
    again = zl(
        "entity",
        "top-up",
        "user-2",
        "-r",
        "budget",
        "--add",
        "weekly:20000000",
        "--idempotency-key",
        "order-1001",
    ).stdout
    assert "replayed" in again
    session = zl("entity", "reset", "user-2", "-r", "budget", "-l", "session").stdout
    assert "session: nothing restored (it was full)" in session and "weekly" not in session
    zl("entity", "delete-limits", "user-2", "-r", "budget", "-y")
    data = zl.json("entity", "available", "user-2", "-r", "budget", "--need", "weekly:1")
    assert data["available"]["weekly"] == 25_000_000  # the free $5 plus the $20 purchase
    assert data["allowed"] is True
    text = zl("entity", "available", "user-2", "-r", "budget", "--need", "weekly:30000000").stdout
    assert "allowed: no" in text
    assert (
        "NAME:N" in zl("entity", "top-up", "user-2", "-r", "budget", "-a", "weekly", code=2).stderr
    )
    assert "Missing option '-a'" in zl("entity", "top-up", "user-2", "-r", "budget", code=2).stderr
    assert "Missing option '-r'" in zl("entity", "reset", "user-2", code=2).stderr
    assert "weekly" in zl.error("entity", "top-up", "user-2", "-r", "budget", "-a", "monthly:5")
    assert (
        "NAME:N"
        in zl("entity", "available", "user-2", "-r", "budget", "--need", "x", code=2).stderr
    )


def test_top_up_help_describes_a_purchase(zl: ZL) -> None:
    text = zl("entity", "top-up", "--help", connect=False).stdout
    assert "A purchase" in text and "idempotency" in text
    assert "upgrade" not in text.lower()


async def test_soft_limit_and_bypass(zl: ZL, live: Repository) -> None:
    """Seed page "Rolling out without enforcing": `--soft NAME` and `entity bypass`."""
    zl("resource", "set-defaults", "budget", "-l", WEEKLY_FREE, "--soft", "weekly")
    limiter = RateLimiter(live)
    async with limiter.acquire(
        "user-7", "search", {"rpm": 1}, also={"budget": {"weekly": 9_000_000}}
    ) as lease:
        assert lease.resource("budget").overdrawn == ["weekly"]
    zl("entity", "bypass", "user-7", "-r", "budget")
    data = zl.json("entity", "available", "user-7", "-r", "budget")
    assert data["bypassed"] is True
    assert await live.get_resource_defaults("budget") == [
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", soft=True)
    ]
    session = Limit.quota("session", 1, reset_after=timedelta(hours=5))
    await live.set_resource_defaults("other", [session])
    assert "session:1@after(5h)" in zl("resource", "get-defaults", "other").stdout


async def test_a_mistyped_entity_id_buys_nothing_and_disables_nothing(zl: ZL) -> None:
    """§5.9: top-up, reset, bypass and disable refuse an unknown entity, exit 1, write nothing."""
    zl("resource", "set-defaults", "budget", *limit_args(WEEKLY_FREE))
    for args in (
        ("entity", "top-up", "ghost-user", "-r", "budget", "-a", "weekly:5"),
        ("entity", "reset", "ghost-user", "-r", "budget"),
        ("entity", "bypass", "nobody-x"),
        ("entity", "disable", "nobody-x", "-r", "budget"),
    ):
        assert "does not exist" in zl.error(*args), args
    assert zl.json("audit", "list", "-e", "ghost-user")["events"] == []
    zl("entity", "create", "user-3")
    zl("entity", "delete", "user-3", "-y")
    again = zl.error("entity", "delete", "user-3", "-y")
    assert "no entity 'user-3'" in again and "nothing to delete" in again
    warned = zl("entity", "set-limits", "api-key-9", "-r", "budget", *limit_args(WEEKLY_FREE))
    assert "no record and no buckets" in warned.stderr


async def test_available_judges_the_cascade_parent_and_a_need_that_never_fits(zl: ZL) -> None:
    """§5.16: the answer is the acquire's: the org's rejection, and no wait for the impossible."""
    zl("resource", "set-defaults", "search", *limit_args("requests:100/min"))
    zl("entity", "create", "org-z")
    zl("entity", "set-limits", "org-z", "-r", "search", *limit_args("requests:1/min"))
    zl("entity", "create", "user-c1", "--parent", "org-z", "--cascade")
    text = zl("entity", "available", "user-c1", "-r", "search", "--need", "requests:2").stdout
    assert "org-z" in text.splitlines()[3]  # the parent's row in the table
    assert "allowed: no (never fits: 2 requests is above the most one call can take " in text
    assert "(1 for org-z)" in text
    zl("resource", "set-defaults", "budget", *limit_args(WEEKLY_FREE))
    data = zl.json("entity", "available", "user-c1", "-r", "budget", "--need", "weekly:6000000")
    assert (data["allowed"], data["retry_after_seconds"]) == (False, None)
    text = zl("entity", "available", "user-c1", "-r", "budget", "--need", "weekly:6000000").stdout
    assert "never fits: 6000000 weekly is above the most one call can take (5000000)" in text


async def test_reset_says_what_it_restored(zl: ZL, live: Repository) -> None:
    """`weekly=0` read as "weekly set to 0": the output names the tokens given back per limit
    and says when a limit was already full."""
    zl("resource", "set-defaults", "budget", *limit_args(WEEKLY_FREE, SESSION_FREE))
    zl("entity", "create", "user-5")
    async with RateLimiter(live).acquire("user-5", "budget", {"weekly": 300}):
        pass
    out = zl("entity", "reset", "user-5", "-r", "budget").stdout
    assert "weekly=" not in out and "session=" not in out
    assert "user-5 / budget: back to the full allowance on 1 shard(s)" in out
    assert "weekly: 300 tokens restored" in out
    assert "session: nothing restored (it was full)" in out
    bought = zl("entity", "top-up", "user-5", "-r", "budget", "-a", "weekly:20").stdout
    assert "user-5 / budget: topped up on 1 shard(s): weekly: +20 tokens" in bought
