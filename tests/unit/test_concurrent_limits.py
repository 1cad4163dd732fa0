"""The concurrency shape of `Limit` (docs/concurrency.md): `Limit.concurrent`, its rules (each a
`ValidationError` naming the fix, raised before any I/O) and every form it is stored in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from zae_limiter import Limit, ScheduleEntry, ValidationError
from zae_limiter.config import from_params, limits_from_json, limits_to_json, to_params
from zae_limiter.core.bucket import MILLI, Kind
from zae_limiter.dynamo.bucket_items import params_from_item, params_to_item
from zae_limiter.limits import identity


def test_a_concurrency_limit_holds_max_in_flight_and_never_drips_or_resets() -> None:
    limit = Limit.concurrent("parallel", 4)
    assert limit.concurrent is True
    assert (limit.capacity, limit.refill_amount, limit.lease_ttl_seconds) == (4, 0, 60)
    assert limit.kind == "concurrent" and not limit.is_quota and limit.refill_rate == 0.0
    assert (limit.schedule, limit.reset_schedule, limit.reset_after) == ((), (), None)
    assert Limit.per_minute("rpm", 4).concurrent is False
    assert Limit.per_minute("rpm", 4).lease_ttl_seconds is None


@pytest.mark.parametrize(
    "ttl", [timedelta(seconds=30), 30, 30.0, timedelta(milliseconds=30_000)], ids=repr
)
def test_lease_ttl_takes_a_timedelta_or_seconds(ttl: timedelta | float) -> None:
    assert Limit.concurrent("parallel", 2, lease_ttl=ttl).lease_ttl_seconds == 30


def test_equality_hash_and_repr() -> None:
    one = Limit.concurrent("parallel", 4, lease_ttl=timedelta(seconds=60))
    assert one == Limit.concurrent("parallel", 4) and hash(one) == hash(
        Limit.concurrent("parallel", 4)
    )
    assert one != Limit.concurrent("parallel", 4, lease_ttl=30)
    assert one != Limit.concurrent("parallel", 5)
    assert one != Limit.concurrent("parallel", 4, soft=True)
    assert identity(one) != identity(Limit.concurrent("parallel", 4, lease_ttl=30))
    assert "concurrent=True" in repr(one) and "lease_ttl_seconds=60" in repr(one)
    # a copy with another lease keeps the two fields that say it in step
    assert replace(one, lease_ttl_seconds=5).refill_period_seconds == 5


@pytest.mark.parametrize(
    ("build", "field", "fix"),
    [
        (lambda: Limit.concurrent("parallel", 0), "max_in_flight", "between 1 and"),
        (lambda: Limit.concurrent("parallel", 10**15 + 1), "max_in_flight", "between 1 and"),
        (lambda: Limit.concurrent("parallel", 2.0), "max_in_flight", "whole number"),  # type: ignore[arg-type]
        (lambda: Limit.concurrent("parallel", 2, lease_ttl=0.5), "lease_ttl", "from 1 s"),
        (lambda: Limit.concurrent("parallel", 2, lease_ttl=0), "lease_ttl", "from 1 s"),
        (
            lambda: Limit.concurrent("parallel", 2, lease_ttl=timedelta(days=1, seconds=1)),
            "lease_ttl",
            "1 day",
        ),
        (lambda: Limit.concurrent("parallel", 2, lease_ttl=1.5), "lease_ttl", "whole seconds"),
        (lambda: Limit.concurrent("parallel", 2, lease_ttl="60"), "lease_ttl", "timedelta"),  # type: ignore[arg-type]
        (lambda: Limit.concurrent("parallel", 2, lease_ttl=True), "lease_ttl", "timedelta"),
        (
            lambda: Limit("parallel", 2, 1, 60, concurrent=True),
            "refill_amount",
            "never drips, drop the refill",
        ),
        (
            lambda: Limit.concurrent("parallel", 2).with_schedule(
                (ScheduleEntry("* 9-17 * * *", scale=2.0),)
            ),
            "schedule",
            "drop the schedule",
        ),
        (
            lambda: Limit(
                "parallel",
                2,
                0,
                60,
                reset_schedule=(ScheduleEntry.reset("0 0 * * *"),),
                concurrent=True,
            ),
            "reset",
            "never resets",
        ),
        (
            lambda: Limit("parallel", 2, 0, 60, reset_after=timedelta(hours=1), concurrent=True),
            "reset",
            "never resets",
        ),
        (
            lambda: Limit("rpm", 2, 2, 60, lease_ttl_seconds=30),
            "lease_ttl_seconds",
            "only a concurrency limit has a lease",
        ),
        (lambda: Limit("parallel", 2, 0, 60, concurrent=1), "concurrent", "True or False"),  # type: ignore[arg-type]
        (lambda: Limit.concurrent("parallel", 2, soft="no"), "soft", "True or False"),  # type: ignore[arg-type]
    ],
)
def test_bad_concurrency_limits_say_what_to_fix(build: Any, field: str, fix: str) -> None:
    with pytest.raises(ValidationError, match=fix) as info:
        build()
    assert info.value.field == field


LIMITS = [
    Limit.concurrent("parallel", 4),
    Limit.concurrent("sessions", 10**6, lease_ttl=timedelta(hours=24), soft=True),
    Limit.concurrent("jobs", 1, lease_ttl=1, alert_at=(80, 100)),
]


@pytest.mark.parametrize("limit", LIMITS, ids=lambda lim: lim.name)
def test_every_stored_form_keeps_it(limit: Limit) -> None:
    data = limit.to_dict()
    assert data["concurrent"] is True and data["lease_ttl_seconds"] == limit.lease_ttl_seconds
    assert "refill_amount" not in data and "refill_period_seconds" not in data
    assert Limit.from_dict(limit.name, data) == limit
    assert limits_from_json(limits_to_json([limit, Limit.per_minute("rpm", 5)])) == (
        limit,
        Limit.per_minute("rpm", 5),
    )
    params = to_params(limit, now=0)
    assert params.kind == Kind.CONCURRENT and params.capacity == limit.capacity * MILLI
    assert (params.refill, params.period_ms) == (0, limit.lease_ttl_seconds * 1000)  # type: ignore[operator]
    assert params_from_item(limit.name, params_to_item(params)) == params
    assert from_params(params) == limit and from_params(params, configured=True) == limit


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"capacity": 2, "concurrent": True, "refill_amount": 2}, "refill_amount"),
        ({"capacity": 2, "concurrent": True, "lease_ttl_seconds": 0}, "lease_ttl_seconds"),
        ({"capacity": 2, "concurrent": True, "lease_ttl_seconds": 86401}, "lease_ttl_seconds"),
        ({"capacity": 2, "concurrent": True, "reset_after_seconds": 60}, "reset"),
        ({"capacity": 2, "lease_ttl_seconds": 30}, "lease_ttl_seconds"),
        ({"capacity": 2, "concurrent": "yes"}, "concurrent"),
    ],
)
def test_bad_stored_forms_are_refused(data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        Limit.from_dict("parallel", data)
    assert info.value.field == field


def test_a_stored_form_without_lease_takes_the_default() -> None:
    assert Limit.from_dict("parallel", {"capacity": 3, "concurrent": True}) == Limit.concurrent(
        "parallel", 3
    )
