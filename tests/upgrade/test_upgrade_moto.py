"""`zae-limiter upgrade` against moto (DynamoDB + Lambda + IAM): request shapes and versions.

The stack starts at aggregator 0.16.0 (see conftest). moto stores the function's code and
reports its `CodeSha256`, which is how these tests see what was pushed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from upgrade_stack import OLD_AGGREGATOR, Stack, put_record

from zae_limiter import IncompatibleSchemaError, Limit, RateLimiter, VersionMismatchError
from zae_limiter.upgrade import UpgradeError, build_aggregator_bundle, upgrade
from zae_limiter.versioning import LIBRARY_VERSION

WEEKLY = Limit.quota("weekly", 1_000, cron="0 0 * * 1")
#: Nothing listens here: a step that reached Lambda would fail (no-ops must not call it).
NO_LAMBDA = "http://127.0.0.1:9"


async def table_items(moto_client: Any, table: str) -> list[dict[str, Any]]:
    response = await moto_client.scan(TableName=table, ConsistentRead=True)
    return sorted(response["Items"], key=lambda item: json.dumps(item, sort_keys=True))


async def test_a_gated_call_is_refused_until_upgrade_then_succeeds(stack: Stack) -> None:
    repo = await stack.open()
    try:
        await RateLimiter(repo).set_resource_defaults("budget", [WEEKLY])
        await repo.create_entity("u1")  # balance operations refuse an unknown entity (§5.9)
        with pytest.raises(VersionMismatchError) as refused:
            await repo.top_up("u1", "budget", {"weekly": 5})
        error = refused.value
        assert (error.feature, error.required_version, error.can_auto_update) == (
            "top_up",
            "0.17.0",
            True,
        )
        assert error.lambda_version == OLD_AGGREGATOR
        assert "top_up" in str(error) and "zae-limiter upgrade" in str(error)

        result = stack.cli("upgrade", "--yes", "--lambda-endpoint-url", stack.endpoint)
        assert "replacing the code of" in result.stderr
        assert "upgraded" not in result.stderr  # the verdict is stdout's, once
        assert f"aggregator:      {LIBRARY_VERSION}" in result.stdout

        expected = build_aggregator_bundle()
        assert stack.code_sha256() == expected.sha256
        record = await stack.record()
        assert (record["aggregator_version"], record["schema_version"], record["updated_by"]) == (
            LIBRARY_VERSION,
            "1.0.0",
            f"cli:{LIBRARY_VERSION}",
        )
        assert record["aggregator_function"] == stack.function
        assert record["client_min_version"] == "0.0.0"  # kept: upgrade never touches it

        granted = await repo.top_up("u1", "budget", {"weekly": 5})
        assert (granted.amounts, granted.replayed) == ({"weekly": 5}, False)
        assert (await repo.get_version_record() or {})["client_min_version"] == "0.17.0"
    finally:
        await repo.close()


async def test_upgrade_moves_a_0_17_0_stack_forward_to_0_18_0(
    stack: Stack, moto_client: Any
) -> None:
    """A stack on the previous release: concurrency limits and alert thresholds wait for an
    0.18.0 aggregator; `upgrade` replaces its code and records it; then they are stored and the
    minimum client rises to 0.18.0 (a 0.17.0 service would misread them)."""
    await put_record(
        moto_client,
        stack.table.name,
        aggregator_version="0.17.0",
        aggregator_function=stack.function,
    )
    repo = await stack.open()
    try:
        limiter = RateLimiter(repo)
        parallel = Limit.concurrent("parallel", 4)
        weekly = Limit.quota("weekly", 1_000, cron="0 0 * * 1", alert_at=(80,))
        for limits, feature in ((parallel, "concurrent_limits"), (weekly, "alert_thresholds")):
            with pytest.raises(VersionMismatchError) as refused:
                await limiter.set_resource_defaults("llm", [limits])
            error = refused.value
            assert (error.feature, error.required_version, error.can_auto_update) == (
                feature,
                "0.18.0",
                True,
            )
            assert error.lambda_version == "0.17.0"
        dry = stack.cli("upgrade", "--dry-run", "--lambda-endpoint-url", NO_LAMBDA).stdout
        assert f"(0.17.0 -> {LIBRARY_VERSION})" in dry and LIBRARY_VERSION == "0.18.0"
        stack.cli("upgrade", "--yes", "--lambda-endpoint-url", stack.endpoint)
        record = await stack.record()
        assert (record["aggregator_version"], record["schema_version"]) == ("0.18.0", "1.0.0")
        assert stack.code_sha256() == build_aggregator_bundle().sha256
        await limiter.set_resource_defaults("llm", [parallel, weekly])
        assert (await repo.get_version_record() or {})["client_min_version"] == "0.18.0"
    finally:
        await repo.close()


async def test_a_second_upgrade_is_a_no_op(stack: Stack, moto_client: Any) -> None:
    first = await upgrade(
        table=stack.table.name,
        endpoint_url=stack.endpoint,
        lambda_endpoint_url=stack.endpoint,
        poll_interval=0,
    )
    assert first.applied and first.code_pushed
    items = await table_items(moto_client, stack.table.name)
    sha = stack.code_sha256()

    again = await upgrade(
        table=stack.table.name, endpoint_url=stack.endpoint, lambda_endpoint_url=NO_LAMBDA
    )
    assert (again.applied, again.code_pushed, again.plan.steps) == (False, False, [])
    assert await table_items(moto_client, stack.table.name) == items
    assert stack.code_sha256() == sha
    result = stack.cli("upgrade", "--yes", "--lambda-endpoint-url", NO_LAMBDA)
    assert result.stdout.strip() == (
        f"table {stack.table.name} is up to date with zae-limiter {LIBRARY_VERSION}"
    )
    assert result.output.count("up to date") == 1  # the verdict once, not on stderr as well


async def test_dry_run_prints_the_steps_and_writes_nothing(stack: Stack, moto_client: Any) -> None:
    items = await table_items(moto_client, stack.table.name)
    sha = stack.code_sha256()

    result = stack.cli("upgrade", "--dry-run", "--lambda-endpoint-url", NO_LAMBDA)
    assert result.stdout.splitlines() == [
        "dry run, nothing written; upgrade would:",
        f"  1. replace the code of aggregator function {stack.function} "
        f"({OLD_AGGREGATOR} -> {LIBRARY_VERSION}) and wait until it is active",
        f"  2. update the version record (aggregator_version {OLD_AGGREGATOR} -> "
        f"{LIBRARY_VERSION}, updated_by cli:{LIBRARY_VERSION})",
    ]
    data = json.loads(stack.cli("upgrade", "--dry-run", "-o", "json").stdout)
    assert (data["dry_run"], data["applied"], data["code_pushed"]) == (True, False, False)
    assert data["code_sha256"] == build_aggregator_bundle().sha256

    assert await table_items(moto_client, stack.table.name) == items
    assert stack.code_sha256() == sha


async def test_force_re_pushes_the_same_version(stack: Stack) -> None:
    await upgrade(
        table=stack.table.name,
        endpoint_url=stack.endpoint,
        lambda_endpoint_url=stack.endpoint,
        poll_interval=0,
    )
    before = await stack.record()
    stack.functions.update_function_code(
        FunctionName=stack.function, ZipFile=b"PK\x05\x06" + bytes(18)
    )  # someone replaced it by hand

    forced = await upgrade(
        table=stack.table.name,
        endpoint_url=stack.endpoint,
        lambda_endpoint_url=stack.endpoint,
        force=True,
        poll_interval=0,
    )
    assert forced.plan.steps[0] == (
        f"re-push the aggregator code {LIBRARY_VERSION} to {stack.function} (--force)"
    )
    assert (forced.applied, forced.code_pushed) == (True, True)
    assert stack.code_sha256() == build_aggregator_bundle().sha256
    after = await stack.record()
    assert {
        k: after[k] for k in ("schema_version", "aggregator_version", "client_min_version")
    } == {k: before[k] for k in ("schema_version", "aggregator_version", "client_min_version")}


async def test_code_already_deployed_is_not_pushed_again(stack: Stack) -> None:
    """An upgrade interrupted after the push but before the record finishes without a push."""
    code = build_aggregator_bundle()
    stack.functions.update_function_code(FunctionName=stack.function, ZipFile=code.zip_bytes)
    result = await upgrade(
        table=stack.table.name,
        endpoint_url=stack.endpoint,
        lambda_endpoint_url=stack.endpoint,
        poll_interval=0,
    )
    assert (result.applied, result.code_pushed) == (True, False)
    assert result.record["aggregator_version"] == LIBRARY_VERSION


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        (
            {"aggregator_version": "0.19.0"},
            VersionMismatchError,
            f"aggregator 0.19.0 is newer than zae-limiter {LIBRARY_VERSION}",
        ),
        (
            {"client_min_version": "0.19.0"},
            VersionMismatchError,
            "older than this table's minimum client version 0.19.0",
        ),
        (
            {"schema_version": "1.1.0"},
            VersionMismatchError,
            "table schema 1.1.0 is newer than this library's 1.0.0",
        ),
        ({"schema_version": "2.0.0"}, IncompatibleSchemaError, "differ in major version"),
    ],
    ids=["aggregator-newer", "client-min-newer", "schema-newer", "schema-major"],
)
async def test_upgrade_never_lowers_a_version(
    stack: Stack, moto_client: Any, fields: dict[str, str], error: type[Exception], says: str
) -> None:
    await put_record(moto_client, stack.table.name, aggregator_function=stack.function, **fields)
    items = await table_items(moto_client, stack.table.name)
    sha = stack.code_sha256()

    with pytest.raises(error, match=re.escape(says)):
        await upgrade(
            table=stack.table.name,
            endpoint_url=stack.endpoint,
            lambda_endpoint_url=NO_LAMBDA,
            force=True,
        )
    assert says in stack.cli("upgrade", "--yes", code=1).stderr

    assert await table_items(moto_client, stack.table.name) == items
    assert stack.code_sha256() == sha


async def test_a_client_below_the_minimum_is_refused_on_open(stack: Stack) -> None:
    repo = await stack.open()
    await repo.set_version_record(client_min_version="0.19.0")
    await repo.close()
    with pytest.raises(VersionMismatchError) as refused:
        await stack.open()
    assert str(refused.value) == (
        f"zae-limiter {LIBRARY_VERSION} is older than this table's minimum client version 0.19.0; "
        "upgrade the library (pip install -U zae-limiter)"
    )
    assert refused.value.can_auto_update is False


async def test_a_missing_function_stops_before_writing_the_record(
    stack: Stack, moto_client: Any
) -> None:
    await put_record(moto_client, stack.table.name, aggregator_function="no-such-function")
    with pytest.raises(UpgradeError, match="named by the version record does not exist"):
        await upgrade(
            table=stack.table.name,
            endpoint_url=stack.endpoint,
            lambda_endpoint_url=stack.endpoint,
            poll_interval=0,
        )
    assert (await stack.record())["aggregator_version"] == OLD_AGGREGATOR


async def test_a_function_that_is_not_the_aggregator_is_left_alone(
    stack: Stack, moto_client: Any
) -> None:
    stack.functions.update_function_configuration(FunctionName=stack.function, Handler="app.main")
    sha = stack.code_sha256()
    with pytest.raises(
        UpgradeError, match=re.escape("runs handler 'app.main', not 'handler.handler'")
    ):
        await upgrade(
            table=stack.table.name,
            endpoint_url=stack.endpoint,
            lambda_endpoint_url=stack.endpoint,
            poll_interval=0,
        )
    assert stack.code_sha256() == sha
    assert (await stack.record())["aggregator_version"] == OLD_AGGREGATOR


async def test_an_old_aggregator_without_a_function_is_refused(
    stack: Stack, moto_client: Any
) -> None:
    await put_record(moto_client, stack.table.name, aggregator_function=None)
    with pytest.raises(
        UpgradeError, match=re.escape("records aggregator 0.16.0 but no aggregator function")
    ):
        await upgrade(
            table=stack.table.name, endpoint_url=stack.endpoint, lambda_endpoint_url=NO_LAMBDA
        )


async def test_declining_the_confirmation_writes_nothing(stack: Stack, moto_client: Any) -> None:
    items = await table_items(moto_client, stack.table.name)
    result = stack.cli("upgrade", "--lambda-endpoint-url", NO_LAMBDA, input="n\n", code=1)
    assert "Apply these 2 steps to table" in result.stderr
    assert await table_items(moto_client, stack.table.name) == items
