"""`plan_upgrade` (pure: a version record in, steps or a refusal out) and the wait for Lambda."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import IncompatibleSchemaError, VersionMismatchError
from zae_limiter.upgrade import (
    Migration,
    MigrationRegistry,
    Step,
    UpgradeError,
    plan_upgrade,
)
from zae_limiter.upgrade.functions import FunctionCode
from zae_limiter.versioning import LIBRARY_VERSION

FUNCTION = "zl-aggregator"


def record(**fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "schema_version": "1.0.0",
        "aggregator_version": LIBRARY_VERSION,
        "aggregator_function": FUNCTION,
        "client_min_version": "0.0.0",
    }
    values.update(fields)
    return values


@pytest.mark.parametrize(
    ("fields", "force", "push", "steps"),
    [
        ({}, False, False, 0),
        ({}, True, True, 2),
        ({"aggregator_version": "0.16.0"}, False, True, 2),
        ({"aggregator_version": None}, False, True, 2),  # a function of unknown version
        ({"aggregator_version": None, "aggregator_function": None}, False, False, 0),
        ({"aggregator_version": None, "aggregator_function": None}, True, False, 0),
        ({"client_min_version": LIBRARY_VERSION}, False, False, 0),
    ],
    ids=[
        "current",
        "force",
        "older-aggregator",
        "unknown-version",
        "no-aggregator",
        "no-aggregator-force",
        "min-equal",
    ],
)
def test_what_an_upgrade_would_do(
    fields: dict[str, Any], force: bool, push: bool, steps: int
) -> None:
    plan = plan_upgrade(record(**fields), table="t", force=force)
    assert plan.refusal is None
    assert (plan.push_code, len(plan.steps), plan.migrations) == (push, steps, ())
    assert plan.aggregator_to == (
        LIBRARY_VERSION if push else fields.get("aggregator_version", LIBRARY_VERSION)
    )


def test_a_newer_patch_release_pushes_its_code() -> None:
    plan = plan_upgrade(record(aggregator_version="0.17.0"), library_version="0.17.1")
    assert plan.push_code and plan.steps == [
        f"replace the code of aggregator function {FUNCTION} (0.17.0 -> 0.17.1) and wait until "
        "it is active",
        "update the version record (aggregator_version 0.17.0 -> 0.17.1, updated_by cli:0.17.1)",
    ]


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"aggregator_version": "0.18.1"}, VersionMismatchError, "is newer than zae-limiter"),
        ({"client_min_version": "0.18.1"}, VersionMismatchError, "minimum client version 0.18.1"),
        ({"schema_version": "1.0.1"}, VersionMismatchError, "newer than this library's"),
        ({"schema_version": "0.9.0"}, IncompatibleSchemaError, "differ in major version"),
        (
            {"aggregator_version": "0.16.0", "aggregator_function": None},
            UpgradeError,
            "but no aggregator function",
        ),
    ],
)
def test_refusals(fields: dict[str, Any], error: type[Exception], says: str) -> None:
    plan = plan_upgrade(record(**fields), table="t", force=True)
    assert isinstance(plan.refusal, error) and says in str(plan.refusal)
    assert (plan.steps, plan.push_code, plan.migrations) == ([], False, ())


def test_a_schema_behind_the_library_lists_its_migrations() -> None:
    registry = MigrationRegistry("1.2.0")
    step = (Step("only", lambda ctx, cursor: _finished()),)
    first = registry.register(Migration("m1", "1.0.0", "1.1.0", step, "first"))
    second = registry.register(Migration("m2", "1.1.0", "1.2.0", step))
    plan = plan_upgrade(record(), registry=registry)
    assert plan.migrations == (first, second)
    assert plan.steps == [
        "run migration m1 (schema 1.0.0 -> 1.1.0): first",
        "run migration m2 (schema 1.1.0 -> 1.2.0)",
        f"update the version record (schema_version 1.0.0 -> 1.2.0, "
        f"updated_by cli:{LIBRARY_VERSION})",
    ]


async def _finished() -> None:
    return None


# --- waiting for Lambda -------------------------------------------------------------------------


class FakeLambda:
    """Answers GetFunctionConfiguration from a script of (State, LastUpdateStatus) pairs."""

    def __init__(self, script: list[tuple[str, str]]) -> None:
        self.script = script
        self.calls = 0

    async def get_function_configuration(self, FunctionName: str) -> dict[str, Any]:
        state, update = self.script[min(self.calls, len(self.script) - 1)]
        self.calls += 1
        return {
            "FunctionName": FunctionName,
            "State": state,
            "LastUpdateStatus": update,
            "LastUpdateStatusReason": "bad zip" if update == "Failed" else "",
        }


async def test_waits_until_the_update_succeeded_and_the_function_is_active() -> None:
    fake = FakeLambda(
        [("Active", "InProgress"), ("Pending", "Successful"), ("Active", "Successful")]
    )
    functions = FunctionCode(fake, poll_interval=0, max_polls=10)
    config = await functions.wait_until_ready(FUNCTION, after_update=True)
    assert (config["State"], functions.polls, fake.calls) == ("Active", 3, 3)


async def test_an_inactive_function_may_be_updated() -> None:
    fake = FakeLambda([("Inactive", "Successful")])
    functions = FunctionCode(fake, poll_interval=0, max_polls=10)
    await functions.wait_until_ready(FUNCTION, after_update=False)
    assert fake.calls == 1


async def test_a_failed_update_is_reported() -> None:
    functions = FunctionCode(
        FakeLambda([("Active", "InProgress"), ("Active", "Failed")]), poll_interval=0, max_polls=10
    )
    with pytest.raises(UpgradeError, match="update of zl-aggregator failed: bad zip"):
        await functions.wait_until_ready(FUNCTION, after_update=True)


async def test_an_update_that_never_finishes_stops_after_max_polls() -> None:
    fake = FakeLambda([("Active", "InProgress")])
    functions = FunctionCode(fake, poll_interval=0, max_polls=4)
    with pytest.raises(UpgradeError, match="did not become active after 4 checks"):
        await functions.wait_until_ready(FUNCTION, after_update=True)
    assert fake.calls == 4
