"""`zae-limiter loadtest` (docs/performance.md): bounded in calls and time, stops by itself, works
in a namespace of its own that it purges, refuses an endpoint off this machine, and checks
admitted <= allowed on the hot organisation."""

from __future__ import annotations

import json

import pytest
from cli_support import ZL

from zae_limiter import Repository
from zae_limiter.errors import ValidationError
from zae_limiter.loadtest import LoadSpec, is_loopback, percentile, validate


def run_json(zl: ZL, *args: str, code: int = 0) -> dict[str, object]:
    result = zl("loadtest", *args, "-o", "json", code=code)
    summary: dict[str, object] = json.loads(result.stdout)
    return summary


async def namespaces(repo: Repository) -> list[str]:
    return [ns["name"] for ns in await repo.list_namespaces()]


async def test_single_is_bounded_by_calls_and_costs_one_wcu(zl: ZL, live: Repository) -> None:
    summary = run_json(
        zl, "--scenario", "single", "--tasks", "4", "--max-calls", "60", "--duration", "120"
    )
    assert summary["calls"] == 60  # the call bound stopped it, long before 120 s
    assert summary["admitted"] == 60 and summary["rejected"] == 0 and summary["errors"] == {}
    # warm single-resource acquire + exit: the admission write only (1 WCU); the first call of
    # each task also creates its item (still one conditional write)
    assert summary["wcu_per_call"] == 1.0
    assert summary["over_admitted"] == 0
    assert all(not name.startswith("loadtest-") for name in await namespaces(live))


async def test_hot_org_never_admits_above_the_org_limit(zl: ZL, live: Repository) -> None:
    summary = run_json(
        zl,
        "--scenario",
        "hot-org",
        "--processes",
        "2",
        "--tasks",
        "8",
        "--max-calls",
        "400",
        "--duration",
        "3",
        "--org-rate",
        "2",
    )
    assert summary["errors"] == {}, summary
    assert summary["rejected"] > 0, summary  # 16 tasks against 2 units/s: the limit bites
    allowed = summary["allowed"]
    assert isinstance(allowed, int)
    assert 0 < summary["units_admitted"] <= allowed  # type: ignore[operator]
    assert summary["over_admitted"] == 0
    assert all(not name.startswith("loadtest-") for name in await namespaces(live))


def test_refuses_an_endpoint_off_this_machine(zl: ZL) -> None:
    result = zl(
        "--endpoint-url",
        "https://dynamodb.eu-west-1.amazonaws.com",
        "loadtest",
        code=1,
        connect=False,
    )
    assert "--i-mean-aws" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url, loopback",
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.9.9.9:1", True),
        ("http://localhost:8000", True),
        ("http://[::1]:8000", True),
        ("https://dynamodb.us-east-1.amazonaws.com", False),
        ("http://10.0.0.1:8000", False),
        (None, False),
        ("", False),
    ],
)
def test_is_loopback(url: str | None, loopback: bool) -> None:
    assert is_loopback(url) is loopback


@pytest.mark.parametrize(
    "change, word",
    [
        ({"scenario": "nope"}, "scenario"),
        ({"processes": 0}, "processes"),
        ({"tasks": 5000}, "tasks"),
        ({"duration_s": 0}, "duration"),
        ({"max_calls": 0}, "max_calls"),
        ({"org_rate": 0}, "org_rate"),
    ],
)
def test_validate_names_the_bad_bound(change: dict[str, object], word: str) -> None:
    spec = LoadSpec(endpoint_url="http://127.0.0.1:8000", **change)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match=word):
        validate(spec)


def test_percentile_nearest_rank() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([5, 1, 3, 2, 4], 50) == 3.0
    assert percentile(list(range(1, 101)), 99) == 99.0
    assert percentile([7], 100) == 7.0
