"""Scheduled invocations of the construct's functions (EventBridge rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct


def invoke_every(
    scope: Construct,
    construct_id: str,
    *,
    every: Duration,
    function: lambda_.IFunction,
    event: Mapping[str, Any],
    description: str,
) -> events.Rule:
    """A rule that invokes `function` with `event` every `every`."""
    return events.Rule(
        scope,
        construct_id,
        description=description,
        schedule=events.Schedule.rate(every),
        targets=[
            targets.LambdaFunction(function, event=events.RuleTargetInput.from_object(dict(event)))
        ],
    )
