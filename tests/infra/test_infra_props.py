"""Property defaults and checks, and properties from CDK context (what `app.py` reads)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_dynamodb as dynamodb

from zae_limiter import schema
from zae_limiter.cdk import ZaeLimiter, ZaeLimiterProps
from zae_limiter.cdk.context import props_from_context


def test_defaults_are_the_reference_defaults() -> None:
    props = ZaeLimiterProps()
    values = {f.name: getattr(props, f.name) for f in dataclasses.fields(props)}
    values["architecture"] = props.architecture.name
    assert values == {
        "table_name": schema.DEFAULT_TABLE_NAME,
        "billing_mode": dynamodb.BillingMode.PAY_PER_REQUEST,
        "read_capacity": 5,
        "write_capacity": 5,
        "point_in_time_recovery": True,
        "deletion_protection": True,  # on unless opted out: the table holds money
        "removal_policy": cdk.RemovalPolicy.RETAIN,
        "encryption_key": None,
        "snapshot_windows": ("hourly", "daily"),
        "usage_retention_days": 90,
        "audit_retention_days": 90,
        "aggregator_memory_mb": 256,
        "aggregator_timeout_seconds": 60,
        "log_retention_days": 30,
        "stream_batch_size": 100,
        "stream_max_batching_window_seconds": 5,
        "stream_retry_attempts": 5,
        "stream_max_record_age_seconds": 3600,
        "enable_alarms": True,
        "alarm_topic": None,
        "duration_alarm_threshold_pct": 80,
        "enable_dashboard": True,
        "enable_tracing": False,
        "create_policies": True,
        "create_roles": False,
        "role_principal": None,
        "namespace_scoped_policies": False,
        "permission_boundary": None,
        "role_name_format": None,
        "policy_name_format": None,
        "aggregator_role_arn": None,
        "enable_audit_archive": False,
        "audit_archive_glacier_days": 90,
        "enable_alerts": False,
        "alerts_bus": None,
        "alert_retention_days": 90,
        "allow_aggregator_downgrade": False,
        "architecture": "arm64",
        "powertools_layer_arn": None,
        "tags": {},
        "replica_regions": (),
        "witness_region": None,
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"snapshot_windows": ("hourly",)}, "snapshot_windows"),
        ({"snapshot_windows": ("hourly", "daily", "weekly")}, "snapshot_windows"),
        ({"log_retention_days": 31}, "log_retention_days"),
        ({"stream_batch_size": 0}, "stream_batch_size"),
        ({"stream_max_record_age_seconds": 90_000}, "24 h"),
        ({"aggregator_timeout_seconds": 901}, "aggregator_timeout_seconds"),
        ({"duration_alarm_threshold_pct": 0}, "duration_alarm_threshold_pct"),
        ({"create_roles": True, "create_policies": False}, "create_roles needs create_policies"),
        ({"role_name_format": "{table_name}-role"}, "role_name_format must contain"),
    ],
)
def test_invalid_properties_are_refused(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ZaeLimiterProps(**overrides)  # type: ignore[arg-type]


def test_unknown_property_is_refused_by_the_construct() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(TypeError, match="table_nmae"):
        ZaeLimiter(stack, "Limiter", table_nmae="typo")


def test_names_from_formats() -> None:
    props = ZaeLimiterProps(table_name="t1", role_name_format="{table_name}-{name}")
    assert props.role_name("app") == "t1-app"
    assert props.policy_name("app") is None


def test_properties_from_context() -> None:
    app = cdk.App(
        context={
            "table_name": "limits",
            "enable_alarms": "false",
            "point_in_time_recovery": False,
            "stream_batch_size": "250",
            "snapshot_windows": "hourly, daily, monthly",
            "billing_mode": "provisioned",
            "removal_policy": "destroy",
            "deletion_protection": "false",  # the documented opt-out
            "tags": '{"team": "payments", "tier": 1}',
            "alarm_topic_arn": "arn:aws:sns:us-east-1:123456789012:ops",
            "aggregator_role_arn": "arn:aws:iam::123456789012:role/agg",
            "architecture": "x86_64",
        }
    )
    stack = cdk.Stack(app, "S")
    props = props_from_context(stack, ZaeLimiterProps(usage_retention_days=30))
    assert props.table_name == "limits"
    assert props.enable_alarms is False
    assert props.point_in_time_recovery is False
    assert props.stream_batch_size == 250
    assert props.snapshot_windows == ("hourly", "daily", "monthly")
    assert props.billing_mode == dynamodb.BillingMode.PROVISIONED
    assert props.removal_policy == cdk.RemovalPolicy.DESTROY
    assert props.deletion_protection is False
    assert props.tags == {"team": "payments", "tier": "1"}
    assert props.alarm_topic is not None
    assert props.alarm_topic.topic_arn == "arn:aws:sns:us-east-1:123456789012:ops"
    assert props.aggregator_role_arn == "arn:aws:iam::123456789012:role/agg"
    assert props.architecture.name == "x86_64"
    assert props.usage_retention_days == 30  # the base is kept where context says nothing


def test_context_values_are_checked() -> None:
    stack = cdk.Stack(cdk.App(context={"enable_alarms": "maybe"}), "S")
    with pytest.raises(ValueError, match="enable_alarms"):
        props_from_context(stack)
    stack = cdk.Stack(cdk.App(context={"architecture": "sparc"}), "S2")
    with pytest.raises(ValueError, match="expected arm64 or x86_64"):
        props_from_context(stack)


def test_context_mistakes_are_all_reported_with_what_to_write() -> None:
    """`-c billing_mode=provisoned -c usage_retention_days=abc -c table_nmae=limits`: one
    ValueError naming all three, with the accepted values and the closest key."""
    app = cdk.App(
        context={
            "billing_mode": "provisoned",
            "usage_retention_days": "abc",
            "table_nmae": "limits",
            "@aws-cdk/core:newStyleStackSynthesis": True,  # the CDK's own keys are left alone
        }
    )
    with pytest.raises(ValueError) as info:
        props_from_context(cdk.Stack(app, "S"))
    message = str(info.value)
    assert "billing_mode='provisoned': expected one of pay_per_request, provisioned" in message
    assert "(did you mean provisioned?)" in message
    assert "usage_retention_days='abc': expected a whole number, e.g. 90" in message
    assert "unknown context key 'table_nmae': did you mean table_name?" in message
    assert "KeyError" not in message and "invalid literal" not in message


def test_app_py_turns_a_context_mistake_into_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, str(root / "app.py")],
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps({"billing_mode": "provisoned"}),
            "CDK_OUTDIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "zae-limiter: invalid CDK context: context billing_mode='provisoned'" in result.stderr
    assert "Traceback" not in result.stderr
