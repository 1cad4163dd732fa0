"""The command line's limit syntax (docs/cli.md): pure parsing and printing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from zae_limiter import Limit, ScheduleEntry
from zae_limiter.cli import limitspec
from zae_limiter.cli.limitspec import SpecError


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("rpm:100", Limit.per_minute("rpm", 100)),
        ("units:1000000/day", Limit.per_day("units", 1_000_000)),
        ("tok:500/10sec:2000", Limit.custom("tok", 2000, 500, 10)),
        ("rps:5/sec", Limit.per_second("rps", 5)),
        ("rph:100/hour:150", Limit.per_hour("rph", 100, 150)),
        ("big:1_000_000/2h", Limit.custom("big", 1_000_000, 1_000_000, 7200)),
        ("weekly:5000000@cron(0 0 * * 1)", Limit.quota("weekly", 5_000_000, cron="0 0 * * 1")),
        (
            "month:100@cron(0 0 1 * *, Europe/Paris)",
            Limit.quota("month", 100, cron="0 0 1 * *", tz="Europe/Paris"),
        ),
        ("twice:10@cron(0 0 * * 1,5)", Limit.quota("twice", 10, cron="0 0 * * 1,5")),
        (
            "paris:10@cron(0 0 * * 1,Europe/Paris)",
            Limit.quota("paris", 10, cron="0 0 * * 1", tz="Europe/Paris"),
        ),
        (
            "session:1000000@after(5h)",
            Limit.quota("session", 1_000_000, reset_after=timedelta(hours=5)),
        ),
        ("s:1@after(1d12h)", Limit.quota("s", 1, reset_after=timedelta(hours=36))),
        ("s:1@after(90)", Limit.quota("s", 1, reset_after=timedelta(seconds=90))),
    ],
)
def test_parse_limit(spec: str, expected: Limit) -> None:
    assert limitspec.parse_limit(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("rpm", "NAME:RATE"),
        ("rpm:", "NAME:RATE"),
        ("rpm:fast", "after NAME:"),
        ("rpm:100/fortnight", "unknown unit"),
        ("rpm:0", "capacity"),
        ("rpm:1.5", "must be a whole number of at least 1"),
        ("rpm:-5", "must be a whole number of at least 1"),
        ("9rpm:100", "limit name"),
        ("wcu:100", "reserved"),
        ("q:10@cron(0 0 * *)", "cron"),
        ("q:10@cron(0 0 * * 1, Mars/Olympus)", "Mars/Olympus"),
        ("q:10@after(5 hours)", "duration"),
        ("q:10@after(0)", r"the session length in 'q:10@after\(0\)' is 0s"),
        ("q:10@weekly(1)", "after NAME:"),
    ],
)
def test_parse_limit_errors(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        limitspec.parse_limit(spec)


def test_soft_and_schedules_apply_to_listed_limits() -> None:
    limits = limitspec.parse_limits(
        ["rpm:100", "weekly:10@cron(0 0 * * 1)"],
        soft=["weekly"],
        schedules=[
            "rpm@cron(* 9-17 * * MON-FRI, Europe/Paris):scale=2",
            "rpm@cron(* 0-5 * * *, Europe/Paris):capacity=200,refill_amount=200,refill_period=60",
        ],
    )
    rpm, weekly = limits
    assert weekly.soft and not rpm.soft
    assert rpm.schedule == (
        ScheduleEntry("* 9-17 * * MON-FRI", "Europe/Paris", scale=2),
        ScheduleEntry(
            "* 0-5 * * *", "Europe/Paris", capacity=200, refill_amount=200, refill_period_seconds=60
        ),
    )


@pytest.mark.parametrize(
    ("limits", "soft", "schedules", "message"),
    [
        (["rpm:1"], ["tpm"], [], "no limit named 'tpm'"),
        (["rpm:1"], [], ["tpm@cron(* * * * *):scale=2"], "no limit named 'tpm'"),
        (["rpm:1"], [], ["rpm@cron(* * * * *)"], "cannot read schedule"),
        (["rpm:1"], [], ["rpm@cron(* * * * *):speed=2"], "speed=2"),
        (["rpm:1"], [], ["rpm@cron(* * * * *):scale=0"], "scale"),
        (["rpm:1", "rpm:2"], [], [], "given twice"),
        (["q:1@after(1h)"], [], ["q@cron(* * * * *):refill_amount=5"], "refill"),
    ],
)
def test_build_errors(
    limits: list[str], soft: list[str], schedules: list[str], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        limitspec.parse_limits(limits, soft, schedules)


@pytest.mark.parametrize(
    "limit",
    [
        Limit.per_minute("rpm", 100),
        Limit.per_day("units", 1_000_000, 2_000_000),
        Limit.custom("tok", 2000, 500, 10),
        Limit.custom("odd", 7, 7, 90),
        Limit.per_second("rps", 5),
        Limit.quota("weekly", 5_000_000, cron="0 0 * * 1"),
        Limit.quota("month", 100, cron="0 0 1 * *", tz="Europe/Paris"),
        Limit.quota("session", 1_000_000, reset_after=timedelta(hours=5), soft=True),
        Limit.per_minute("sched", 10).with_schedule(
            (ScheduleEntry("* 9-17 * * *", "Asia/Tokyo", scale=1.5),)
        ),
    ],
)
def test_printing_round_trips(limit: Limit) -> None:
    args = limitspec.to_args([limit])
    specs = [args[i + 1] for i in range(0, len(args), 2) if args[i] == "-l"]
    soft = [args[i + 1] for i in range(0, len(args), 2) if args[i] == "--soft"]
    schedules = [args[i + 1] for i in range(0, len(args), 2) if args[i] == "--schedule"]
    assert limitspec.parse_limits(specs, soft, schedules) == [limit]


def test_describe_and_durations() -> None:
    limit = Limit.quota("weekly", 5, cron="0 0 * * 1", soft=True)
    assert limitspec.describe(limit) == "weekly:5@cron(0 0 * * 1) (soft)"
    assert [limitspec.format_duration(s) for s in (90, 3600, 129600, 5)] == [
        "1m30s",
        "1h",
        "1d12h",
        "5s",
    ]
    assert limitspec.parse_duration("1d12h") == 129600


@pytest.mark.parametrize(
    ("specs", "expected"),
    [(["weekly:20000000"], {"weekly": 20_000_000}), (["a:1", "b:2"], {"a": 1, "b": 2})],
)
def test_amounts(specs: list[str], expected: dict[str, int]) -> None:
    assert limitspec.parse_amounts(specs) == expected


@pytest.mark.parametrize("spec", ["weekly", "weekly:", "weekly:-1", "weekly:0", ":5", "w:1.5"])
def test_amount_errors(spec: str) -> None:
    with pytest.raises(SpecError):
        limitspec.parse_amounts([spec])


@pytest.mark.parametrize(
    ("spec", "expected", "printed"),
    [
        ("parallel:4@concurrent", Limit.concurrent("parallel", 4), "parallel:4@concurrent"),
        (
            "jobs:2@concurrent(5m)",
            Limit.concurrent("jobs", 2, lease_ttl=timedelta(minutes=5)),
            "jobs:2@concurrent(5m)",
        ),
        ("s:1@concurrent(1d)", Limit.concurrent("s", 1, lease_ttl=86400), "s:1@concurrent(1d)"),
        ("s:1@concurrent(60)", Limit.concurrent("s", 1), "s:1@concurrent"),
    ],
)
def test_concurrency_limits_parse_print_and_round_trip(
    spec: str, expected: Limit, printed: str
) -> None:
    assert limitspec.parse_limit(spec) == expected
    assert limitspec.format_limit(expected) == printed
    soft = replace(expected, soft=True)
    args = limitspec.to_args([soft])
    assert args == ["-l", printed, "--soft", expected.name]
    assert limitspec.parse_limits([printed], [expected.name]) == [soft]
    assert limitspec.describe(soft) == f"{printed} (soft)"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("p:0@concurrent", "max_in_flight"),
        ("p:2@concurrent(0s)", r"the lease in 'p:2@concurrent\(0s\)' is 0s; use 1s to 1d"),
        ("p:2@concurrent(1d1s)", "use 1s to 1d"),
        ("p:2@concurrent(soon)", "duration"),
        ("p:2@concurent", "MAX@concurrent"),
    ],
)
def test_concurrency_limit_errors(spec: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        limitspec.parse_limit(spec)
