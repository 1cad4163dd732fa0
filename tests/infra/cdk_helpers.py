"""Helpers for reading synthesized CloudFormation templates in the CDK tests."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Template

TOKEN = "<token>"


def resources(template: Template, resource_type: str) -> dict[str, dict[str, Any]]:
    """Every resource of one type: logical id -> resource."""
    return {name: dict(body) for name, body in template.find_resources(resource_type).items()}


def only(template: Template, resource_type: str) -> dict[str, Any]:
    """The single resource of a type (fails if there is not exactly one)."""
    found = resources(template, resource_type)
    assert len(found) == 1, f"expected one {resource_type}, found {sorted(found)}"
    return next(iter(found.values()))


def logical_id(template: Template, resource_type: str, path_part: str) -> str:
    """The logical id of the one resource of a type whose id contains `path_part`."""
    matches = [lid for lid in resources(template, resource_type) if path_part in lid]
    assert len(matches) == 1, f"{resource_type} with {path_part!r}: {matches}"
    return matches[0]


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """The statements of an IAM::Policy or IAM::ManagedPolicy resource."""
    found = policy["Properties"]["PolicyDocument"]["Statement"]
    return list(found)


def by_sid(policy: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A policy's statements keyed by Sid (every statement must have one)."""
    result = {}
    for statement in statements(policy):
        assert "Sid" in statement, f"statement without Sid: {statement}"
        result[statement["Sid"]] = statement
    return result


def actions(statement: dict[str, Any]) -> list[str]:
    found = statement["Action"]
    return sorted([found] if isinstance(found, str) else found)


def render(value: Any) -> str:
    """A string with every CloudFormation token (Ref, GetAtt, ...) replaced by `<token>`."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and set(value) == {"Fn::Join"}:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(part) for part in parts)
    return TOKEN


def dashboard_body(template: Template) -> dict[str, Any]:
    """The parsed body of the template's dashboard (tokens rendered as `<token>`)."""
    dashboard = only(template, "AWS::CloudWatch::Dashboard")
    body: dict[str, Any] = json.loads(render(dashboard["Properties"]["DashboardBody"]))
    return body


def filter_matches(pattern: Any, event: Any) -> bool:
    """Lambda event filtering, for the operators the construct uses: values, anything-but, exists.

    A pattern key must be present in the event (except `exists: false`); a list of values matches
    if any value matches.
    """
    if isinstance(pattern, dict):
        if not isinstance(event, dict):
            return False
        for key, sub in pattern.items():
            if key not in event:
                if sub == [{"exists": False}]:
                    continue
                return False
            if not filter_matches(sub, event[key]):
                return False
        return True
    assert isinstance(pattern, list), pattern
    for rule in pattern:
        if isinstance(rule, dict) and "anything-but" in rule:
            if event not in rule["anything-but"]:
                return True
        elif isinstance(rule, dict) and "exists" in rule:
            if rule["exists"]:
                return True
        elif rule == event:
            return True
    return False
