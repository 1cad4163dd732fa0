"""The alerts bus (docs/alerts.md): the construct creates one (or uses the one given), tells the
aggregator its name and lets the aggregator, and nobody else, put events on it."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_events as events
from aws_cdk.assertions import Template
from cdk_helpers import actions, logical_id, only, resources, statements

from zae_limiter.cdk import ZaeLimiterProps, ZaeLimiterStack

FUNCTION = "AWS::Lambda::Function"


def _aggregator_env(template: Template) -> dict[str, Any]:
    functions = resources(template, FUNCTION)
    function = functions[logical_id(template, FUNCTION, "AggregatorFunction")]
    env: dict[str, Any] = function["Properties"]["Environment"]["Variables"]
    return env


def _granting_put_events(template: Template) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(resource type, logical id, statements) of every policy that allows events:*."""
    found = []
    for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
        for lid, policy in resources(template, kind).items():
            granting = [s for s in statements(policy) if "events:" in json.dumps(s["Action"])]
            if granting:
                found.append((kind, lid, granting))
    return found


def test_alerts_bus_is_created_and_only_the_aggregator_may_put_to_it() -> None:
    app = cdk.App()
    stack = ZaeLimiterStack(
        app, "Alerts", props=ZaeLimiterProps(table_name="zl-alerts", enable_alerts=True)
    )
    template = Template.from_stack(stack)
    only(template, "AWS::Events::EventBus")
    bus_id = logical_id(template, "AWS::Events::EventBus", "AlertsBus")
    assert _aggregator_env(template)["ALERTS_BUS"] == {"Ref": bus_id}
    assert _aggregator_env(template)["ALERT_RETENTION_DAYS"] == "90"
    granting = _granting_put_events(template)
    assert [(kind, "AggregatorRole" in lid) for kind, lid, _ in granting] == [
        ("AWS::IAM::Policy", True)
    ]
    ((_, _, found),) = granting
    (publish,) = found
    assert publish["Sid"] == "AlertsPublish" and publish["Effect"] == "Allow"
    assert actions(publish) == ["events:PutEvents"]
    assert publish["Resource"] == {"Fn::GetAtt": [bus_id, "Arn"]}
    outputs = template.to_json()["Outputs"]
    assert any("AlertsBusName" in name for name in outputs)


def test_without_alerts_there_is_no_bus_and_no_grant() -> None:
    app = cdk.App()
    template = Template.from_stack(ZaeLimiterStack(app, "Plain"))
    assert resources(template, "AWS::Events::EventBus") == {}
    assert _granting_put_events(template) == []
    assert "ALERTS_BUS" not in _aggregator_env(template)


def test_a_given_bus_is_used() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "Given")
    bus = events.EventBus.from_event_bus_name(stack, "Default", "default")
    ZaeLimiterStack(app, "WithDefault", props=ZaeLimiterProps(alerts_bus=bus))
    template = Template.from_stack(app.node.find_child("WithDefault"))  # type: ignore[arg-type]
    assert resources(template, "AWS::Events::EventBus") == {}
    assert _aggregator_env(template)["ALERTS_BUS"] == "default"
