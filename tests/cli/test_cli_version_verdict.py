"""`check`, `upgrade --dry-run`, gate errors and `can_auto_update` read one verdict
(versioning.assess), so they agree on every version record (docs/versions.md)."""

from __future__ import annotations

from typing import Any

import pytest
from cli_support import ZL

from zae_limiter import Repository, VersionMismatchError, versioning
from zae_limiter.dynamo import keys

FUNCTION = "zael-aggregator"


async def record(repo: Repository, **fields: Any) -> dict[str, Any]:
    names = {f"#f{i}": name for i, name in enumerate(fields)}
    sets, removes, values = [], [], {}
    for i, value in enumerate(fields.values()):
        if value is None:
            removes.append(f"#f{i}")
        else:
            sets.append(f"#f{i} = :v{i}")
            values[f":v{i}"] = value
    expression = ("SET " + ", ".join(sets) if sets else "") + (
        " REMOVE " + ", ".join(removes) if removes else ""
    )
    await repo._store.update(
        keys.version_record(),
        expression.strip(),
        names=names,
        values=values or None,
        return_new=False,
    )
    repo._shared.gates_passed.clear()
    return await repo.get_version_record() or {}


def check(zl: ZL) -> dict[str, Any]:
    result: dict[str, Any] = zl.json("check")
    return result


def dry_run(zl: ZL, *, code: int) -> tuple[list[str], str]:
    result = zl("upgrade", "--dry-run", "-o", "json", code=code)
    if code:
        return [], result.stderr
    data: dict[str, Any] = __import__("json").loads(result.stdout)
    return data["steps"], ""


async def test_an_older_aggregator_without_a_function_gets_one_verdict(
    zl: ZL, live: Repository
) -> None:
    await record(live, aggregator_version="0.16.0", aggregator_function=None)
    verdict = check(zl)
    assert verdict["compatible"] and verdict["aggregator_older"]
    assert verdict["upgrade_would"] == [] and "cdk deploy" in verdict["upgrade_refused"]
    assert verdict["can_auto_update"] is False
    _, refused = dry_run(zl, code=1)
    assert verdict["upgrade_refused"] in refused
    text = zl("check").stdout
    assert "upgrade would: refuse (" in text and "cdk deploy" in text
    with pytest.raises(VersionMismatchError) as gate:
        await live.top_up("u1", "budget", {"weekly": 1})
    assert gate.value.can_auto_update is False
    assert "cdk deploy" in str(gate.value) and "zae-limiter upgrade" not in str(gate.value)


async def test_a_function_without_a_version_plans_the_same_steps(zl: ZL, live: Repository) -> None:
    await record(live, aggregator_version=None, aggregator_function=FUNCTION)
    verdict = check(zl)
    steps, _ = dry_run(zl, code=0)
    assert len(steps) == 2 and verdict["upgrade_would"] == steps
    assert verdict["can_auto_update"] is True
    assert "change nothing" not in zl("check").stdout


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"schema_version": "1.0.7"}, "table schema 1.0.7 is newer than this library's 1.0.0"),
        (
            {"aggregator_version": "0.19.0", "aggregator_function": FUNCTION},
            "the stack's aggregator 0.19.0 is newer than zae-limiter 0.18.0",
        ),
    ],
    ids=["schema-patch-newer", "aggregator-newer"],
)
async def test_a_stack_ahead_of_the_library_gets_one_verdict(
    zl: ZL, live: Repository, fields: dict[str, str], says: str
) -> None:
    await record(live, **fields)
    verdict = check(zl)
    assert verdict["compatible"]  # usable, but upgrade would be a downgrade: both say so
    assert verdict["upgrade_would"] == [] and says in verdict["upgrade_refused"]
    assert f"upgrade would: refuse ({says}" in zl("check").stdout
    _, refused = dry_run(zl, code=1)
    assert says in refused


async def test_a_pre_release_sorts_before_its_release(zl: ZL, live: Repository) -> None:
    assert versioning.parse("0.18.0rc1") < versioning.parse("0.18.0") < versioning.parse("0.18.1")
    await record(live, aggregator_version="0.18.0rc1", aggregator_function=FUNCTION)
    verdict = check(zl)
    assert verdict["aggregator_older"] and verdict["can_auto_update"]
    steps, _ = dry_run(zl, code=0)
    assert verdict["upgrade_would"] == steps
    assert "(0.18.0rc1 -> 0.18.0)" in steps[0]
