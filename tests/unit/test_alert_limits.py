"""`alert_at` on limits (docs/alerts.md): validation, and every form a limit takes keeps it:
to_dict/from_dict (config levels), the bucket stamp, the manifest and the CLI spec."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from zae_limiter import Limit, ValidationError
from zae_limiter.cli import limitspec
from zae_limiter.config import from_params, limits_from_json, limits_to_json, to_params
from zae_limiter.dynamo.bucket_items import params_from_item, params_to_item
from zae_limiter.manifest import ManifestError, loads
from zae_limiter.manifest.plan import limit_to_manifest

ALERTING = [
    Limit.per_minute("rpm", 100, alert_at=(80, 100)),
    Limit.custom("tok", 2000, 500, 10, alert_at=(50,)),
    Limit.quota("weekly", 5_000_000, cron="0 0 * * 1", alert_at=(50, 80, 100)),
    Limit.quota("session", 1000, reset_after=timedelta(hours=5), soft=True, alert_at=(100, 150)),
    Limit.per_day("rpd", 10, soft=True, alert_at=(1000,)),
]


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ((0,), "from 1 to 1000"),
        ((1001,), "from 1 to 1000"),
        ((80.0,), "whole percent"),
        ((True,), "whole percent"),
        ((80, 80), "once"),
        ("80", "tuple of whole percents"),
        (80, "tuple of whole percents"),
    ],
)
def test_bad_thresholds_say_what_to_fix(value: object, fix: str) -> None:
    with pytest.raises(ValidationError, match=fix):
        Limit.per_minute("rpm", 10, alert_at=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: Limit.per_minute("rpm", 10, **kw),
        lambda **kw: Limit.quota("weekly", 100, cron="0 0 * * 1", **kw),
        lambda **kw: Limit.concurrent("parallel", 2, **kw),
    ],
    ids=["rate", "quota", "concurrent"],
)
def test_a_threshold_above_100_on_a_hard_limit_is_refused(make: Any) -> None:
    """A hard limit refuses what would take it past 100 %: such a threshold could never fire."""
    with pytest.raises(ValidationError, match="can never be crossed") as refused:
        make(alert_at=(80, 120))
    assert refused.value.field == "alert_at" and "soft=True" in str(refused.value)
    assert make(alert_at=(80, 100)).alert_at == (80, 100)
    if make(alert_at=()).kind != "concurrent":
        assert make(alert_at=(100, 120), soft=True).alert_at == (100, 120)


def test_thresholds_are_stored_ascending() -> None:
    assert Limit.quota("q", 10, cron="0 0 * * 1", alert_at=(100, 50, 80)).alert_at == (50, 80, 100)
    assert Limit.per_minute("rpm", 10, alert_at=[90, 10]).alert_at == (10, 90)  # type: ignore[arg-type]
    assert Limit.per_minute("rpm", 10).alert_at == ()
    assert "alert_at" not in Limit.per_minute("rpm", 10).to_dict()


@pytest.mark.parametrize("limit", ALERTING, ids=lambda limit: limit.name)
def test_every_form_keeps_the_thresholds(limit: Limit) -> None:
    assert limit.to_dict()["alert_at"] == list(limit.alert_at)
    assert Limit.from_dict(limit.name, limit.to_dict()) == limit
    assert limits_from_json(limits_to_json([limit])) == (limit,)
    stamped = to_params(limit)
    assert stamped.alerts == limit.alert_at
    assert params_from_item(limit.name, params_to_item(stamped)) == stamped
    assert from_params(stamped, configured=True) == limit
    args = limitspec.to_args([limit])
    specs = [args[i + 1] for i, a in enumerate(args) if a == "-l"]
    soft = [args[i + 1] for i, a in enumerate(args) if a == "--soft"]
    alerts = [args[i + 1] for i, a in enumerate(args) if a == "--alert"]
    assert limitspec.parse_limits(specs, soft, (), alerts) == [limit]
    assert "alert at" in limitspec.describe(limit)


def test_manifest_alert_at() -> None:
    manifest = loads(
        "namespace: default\nresources:\n  budget:\n    limits:\n"
        "      weekly: {capacity: 100, reset_schedule: [{cron: '0 0 * * 1'}], alert_at: [80, 50]}\n"
    )
    (weekly,) = manifest.resources["budget"].limits or ()
    assert weekly.alert_at == (50, 80)
    assert limit_to_manifest(weekly)["alert_at"] == [50, 80]
    for bad, reason in (("80", "list of whole percents"), ("[80.5]", "integer"), ("[0]", "1 to")):
        with pytest.raises(ManifestError, match=reason):
            loads(
                "namespace: default\nresources:\n  r:\n    limits:\n"
                f"      rpm: {{capacity: 10, alert_at: {bad}}}\n"
            )


def test_cli_alert_option_errors() -> None:
    with pytest.raises(limitspec.SpecError, match="NAME:PCT"):
        limitspec.parse_limits(["rpm:10"], (), (), ["rpm"])
    with pytest.raises(limitspec.SpecError, match="no limit named"):
        limitspec.parse_limits(["rpm:10"], (), (), ["tpm:80"])
    with pytest.raises(limitspec.SpecError, match="from 1 to 1000"):
        limitspec.parse_limits(["rpm:10"], (), (), ["rpm:0"])
    assert limitspec.parse_limits(["rpm:10"], (), (), ["rpm:80%,100"])[0].alert_at == (80, 100)
