"""Feature gates (docs/versions.md) on DynamoDB Local: every gated call refuses an older
aggregator before writing; success raises `client_min_version`, never above the library's own
version and never lower than it was; a concurrent ratchet is not an error."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from support.iam_check import ADMIN, acting_as
from zae_limiter import Limit, RateLimiter, Repository, VersionMismatchError, versioning
from zae_limiter.admin import gates
from zae_limiter.dynamo import keys
from zae_limiter.manifest import apply_manifest, loads
from zae_limiter.versioning import LIBRARY_VERSION

pytestmark = pytest.mark.ddb

WEEKLY = Limit.quota("weekly", 1_000, cron="0 0 * * 1")
SESSION = Limit.quota("session", 100, reset_after=timedelta(hours=5))
SOFT = Limit.per_minute("rpm", 10, soft=True)
RPM = Limit.per_minute("rpm", 10)
PARALLEL = Limit.concurrent("parallel", 2)
ALERTING = Limit.per_minute("rpm", 10, alert_at=(80,))

Call = Callable[[Repository, RateLimiter], Awaitable[Any]]


async def acquire(limiter: RateLimiter, limits: list[Limit], consume: dict[str, int]) -> None:
    async with limiter.acquire("u1", "budget", consume, limits=limits):
        pass


async def acquire_as_admin(
    limiter: RateLimiter, limits: list[Limit], consume: dict[str, int]
) -> None:
    """The acquire path with an admin's credentials: raising `client_min_version` is an admin's
    write, which an `app` principal is refused (docs/deploying.md)."""
    with acting_as(ADMIN):
        await acquire(limiter, limits, consume)


#: (feature, gated call, whether success raises the minimum client version)
GATED: dict[str, tuple[str, Call, bool]] = {
    "top_up": ("top_up", lambda r, _: r.top_up("u1", "budget", {"weekly": 1}), True),
    "reset_bucket": ("reset_bucket", lambda r, _: r.reset_bucket("u1", "budget"), True),
    "set_parent": ("set_parent", lambda r, _: r.set_parent("u1", "org"), True),
    "soft-entity": ("soft_limits", lambda r, _: r.set_limits("u1", [SOFT], "budget"), True),
    "soft-resource": ("soft_limits", lambda r, _: r.set_resource_defaults("api", [SOFT]), True),
    "soft-system": ("soft_limits", lambda r, _: r.set_system_defaults([SOFT]), True),
    "soft-acquire": ("soft_limits", lambda _, lim: acquire(lim, [SOFT], {"rpm": 1}), False),
    "bypass-resource": ("bypass", lambda r, _: r.bypass_resource("budget"), True),
    "bypass-entity": ("bypass", lambda r, _: r.bypass_entity("u1", "budget"), True),
    "bypass-flag": (
        "bypass",
        lambda r, _: r.set_limits("u1", [RPM], "api", disabled="bypass"),
        True,
    ),
    "cascade-resource": (
        "cascade_policy",
        lambda r, _: r.set_resource_cascade("budget", True),
        True,
    ),
    "cascade-clear": ("cascade_policy", lambda r, _: r.clear_resource_cascade("budget"), True),
    "cascade-entity": (
        "cascade_policy",
        lambda r, _: r.set_entity_cascade("u1", True, "budget"),
        True,
    ),
    "cascade-entity-clear": ("cascade_policy", lambda r, _: r.clear_entity_cascade("u1"), True),
    "cascade-argument": (
        "cascade_policy",
        lambda r, _: r.set_resource_defaults("api", [RPM], cascade=False),
        True,
    ),
    "session-stored": (
        "session_quotas",
        lambda r, _: r.set_limits("u1", [SESSION], "budget"),
        True,
    ),
    "session-acquire": (
        "session_quotas",
        lambda _, lim: acquire_as_admin(lim, [SESSION], {"session": 1}),
        True,
    ),
    "concurrent-stored": (
        "concurrent_limits",
        lambda r, _: r.set_resource_defaults("llm", [PARALLEL]),
        True,
    ),
    "concurrent-acquire": (
        "concurrent_limits",
        lambda _, lim: acquire_as_admin(lim, [PARALLEL], {"parallel": 1}),
        True,
    ),
    "alerts-stored": (
        "alert_thresholds",
        lambda r, _: r.set_limits("u1", [ALERTING], "api"),
        True,
    ),
    "alerts-acquire": (
        "alert_thresholds",
        lambda _, lim: acquire_as_admin(lim, [ALERTING], {"rpm": 1}),
        True,
    ),
}


def just_below(version: str) -> str:
    major, minor, _ = version.split(".")
    return f"{major}.{int(minor) - 1}.9"


async def minimum(repo: Repository) -> str:
    return str((await repo.get_version_record() or {})["client_min_version"])


@pytest.fixture
async def stocked(repo: Repository, limiter: RateLimiter) -> Repository:
    """Entities and defaults the gated calls need, written before any aggregator is recorded."""
    await repo.create_entity("org")
    await repo.create_entity("u1")
    await limiter.set_resource_defaults("budget", [WEEKLY])
    assert await minimum(repo) == "0.0.0"
    return repo


def test_the_gate_table_is_the_specification() -> None:
    assert gates.REQUIRED == {
        "top_up": "0.17.0",
        "reset_bucket": "0.17.0",
        "set_parent": "0.17.0",
        "soft_limits": "0.17.0",
        "bypass": "0.17.0",
        "cascade_policy": "0.16.0",
        "session_quotas": "0.15.0",
        "concurrent_limits": "0.18.0",
        "alert_thresholds": "0.18.0",
    }
    # the seed pages' "0.17.0 or later" for top_up, reset_bucket, set_parent and soft limits
    assert {gates.REQUIRED[f] for f in ("top_up", "reset_bucket", "set_parent", "soft_limits")} == {
        "0.17.0"
    }


async def record_function(repo: Repository, name: str) -> None:
    await repo._store.update(
        keys.version_record(),
        "SET aggregator_function = :f",
        values={":f": name},
        return_new=False,
    )


@pytest.mark.parametrize("function", [None, "zael-aggregator"], ids=["no-function", "function"])
@pytest.mark.parametrize("case", list(GATED))
async def test_an_older_aggregator_refuses_before_any_write(
    case: str, function: str | None, stocked: Repository, limiter: RateLimiter, wire: Any
) -> None:
    feature, call, _ = GATED[case]
    required = gates.REQUIRED[feature]
    await stocked.set_version_record(aggregator_version=just_below(required))
    if function:
        await record_function(stocked, function)
    with wire.block() as w, pytest.raises(VersionMismatchError) as refused:
        await call(stocked, limiter)
    error = refused.value
    # the verdict upgrade acts on: it can replace the code only of a recorded function
    verdict = versioning.assess(await stocked.get_version_record() or {})
    assert (error.feature, error.required_version, error.can_auto_update) == (
        feature,
        required,
        function is not None,
    )
    assert verdict.can_auto_update is (function is not None)
    assert error.lambda_version == just_below(required)
    remedy = (
        "run `zae-limiter upgrade`"
        if function
        else f"redeploy the stack with `cdk deploy` using zae-limiter {LIBRARY_VERSION}"
    )
    assert str(error) == (
        f"{feature} needs an aggregator of version {required} or later, but the stack runs "
        f"{just_below(required)}; {remedy}"
    )
    assert not {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"} & set(w.by_operation)
    assert await minimum(stocked) == "0.0.0"


@pytest.mark.parametrize("case", list(GATED))
async def test_success_raises_the_minimum_client_version(
    case: str, stocked: Repository, limiter: RateLimiter
) -> None:
    feature, call, ratchets = GATED[case]
    required = gates.REQUIRED[feature]
    await stocked.set_version_record(aggregator_version=required)
    await call(stocked, limiter)
    assert await minimum(stocked) == (required if ratchets else "0.0.0")


async def test_no_aggregator_recorded_passes_and_ratchets(stocked: Repository) -> None:
    assert (await stocked.get_version_record() or {})["aggregator_version"] is None
    await stocked.top_up("u1", "budget", {"weekly": 1})
    assert await minimum(stocked) == "0.17.0"


async def test_the_minimum_is_never_lowered(stocked: Repository) -> None:
    await stocked.set_version_record(aggregator_version="0.17.0", client_min_version="0.17.0")
    await stocked.set_limits("u1", [SESSION], "budget")  # session quotas need only 0.15.0
    assert await minimum(stocked) == "0.17.0"


async def test_the_minimum_never_exceeds_the_library(
    stocked: Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(gates.REQUIRED, "top_up", "0.19.0")
    await stocked.set_version_record(aggregator_version="0.19.0")
    await stocked.top_up("u1", "budget", {"weekly": 1})
    assert await minimum(stocked) == LIBRARY_VERSION


async def test_a_passed_gate_is_cached_per_repository(stocked: Repository, wire: Any) -> None:
    await stocked.set_version_record(aggregator_version="0.17.0")
    await stocked.top_up("u1", "budget", {"weekly": 1})
    with wire.block() as w:
        await stocked.top_up("u1", "budget", {"weekly": 1})
    version_key = keys.version_record()["PK"]
    assert [r for r in w.operations("GetItem") if r.params["Key"]["PK"]["S"] == version_key] == []


@pytest.mark.parametrize(
    ("stored", "update_calls"),
    [("0.16.0", 2), ("0.17.0", 1)],
    ids=["raised-meanwhile-below-target", "raised-meanwhile-to-target"],
)
async def test_a_concurrent_ratchet_is_not_an_error(
    stocked: Repository,
    monkeypatch: pytest.MonkeyPatch,
    wire: Any,
    stored: str,
    update_calls: int,
) -> None:
    """The gate read 0.0.0, but another client raised the minimum before this one wrote."""
    await stocked.set_version_record(aggregator_version="0.17.0")
    stale = await stocked._store.get(keys.version_record())
    await stocked.set_version_record(client_min_version=stored)
    real_get = stocked._store.get

    async def stale_version_record(key: dict[str, str], *, consistent: bool = True) -> Any:
        if key == keys.version_record():
            return stale
        return await real_get(key, consistent=consistent)

    with monkeypatch.context() as patched, wire.block() as w:
        patched.setattr(stocked._store, "get", stale_version_record)
        await gates.check_gate(stocked.scope, "top_up")
    updates = w.operations("UpdateItem")
    assert len(updates) == update_calls
    assert [r.conditional_failure for r in updates] == [True] + [False] * (update_calls - 1)
    assert await minimum(stocked) == "0.17.0"


@pytest.mark.parametrize(
    ("limit", "feature"),
    [
        ("{capacity: 2, concurrent: true}", "concurrent_limits"),
        ("{capacity: 600, alert_at: [80]}", "alert_thresholds"),
    ],
)
async def test_a_manifest_with_an_0_18_0_feature_is_refused_before_any_write(
    stocked: Repository, wire: Any, limit: str, feature: str
) -> None:
    """The manifest equivalents of `Limit.concurrent` and `alert_at` wait for an 0.18.0
    aggregator like the calls do: refused while planning the apply, nothing written."""
    await stocked.set_version_record(aggregator_version="0.17.0", updated_by="cdk:0.17.0")
    manifest = loads(f"namespace: default\nresources:\n  llm:\n    limits:\n      x: {limit}\n")
    with wire.block() as w, pytest.raises(VersionMismatchError) as refused:
        await apply_manifest(stocked, manifest)
    assert (refused.value.feature, refused.value.required_version) == (feature, "0.18.0")
    assert not {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"} & set(w.by_operation)
