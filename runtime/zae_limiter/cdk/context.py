"""Build `ZaeLimiterProps` from CDK context (`cdk deploy -c table_name=limits -c ...`).

Every scalar property is read under its own name; values from the command line are strings and
are converted by the type of the property's default. Properties that are constructs are given
as ARNs: `encryption_key_arn`, `alarm_topic_arn`, `permission_boundary_arn`, `role_principal_arn`,
`alerts_bus_arn`.
`snapshot_windows` is comma-separated; `tags` is a JSON object.

Every problem is reported at once, each saying what to write: an enum value that is not one of
its members (`billing_mode=provisoned`), a number that is not a whole number, and a key that is
none of ours (`table_nmae`), with the closest names. Keys with `:` or starting with `@` belong to
the CDK itself and are left alone.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from enum import Enum
from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from .props import ARCHITECTURES, ZaeLimiterProps

ENUMS: dict[str, type[Enum]] = {
    "billing_mode": dynamodb.BillingMode,
    "removal_policy": RemovalPolicy,
}
#: Context keys `app.py` reads besides the properties.
APP_KEYS = ("stack_name", "nag")
ARN_PROPERTIES = {
    "encryption_key": "encryption_key_arn",
    "alarm_topic": "alarm_topic_arn",
    "permission_boundary": "permission_boundary_arn",
    "role_principal": "role_principal_arn",
    "alerts_bus": "alerts_bus_arn",
}


def as_bool(name: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"context {name}={raw!r}: expected true or false")


def _convert(name: str, default: Any, raw: Any) -> Any:
    if name == "architecture":
        text = str(raw).strip().lower()
        if text not in ARCHITECTURES:
            expected = " or ".join(sorted(ARCHITECTURES))
            raise ValueError(f"context architecture={raw!r}: expected {expected}")
        return ARCHITECTURES[text]
    if name in ENUMS:
        members = [member.name for member in ENUMS[name]]
        if str(raw).upper() not in members:
            close = difflib.get_close_matches(str(raw).upper(), members, n=1)
            hint = f" (did you mean {close[0].lower()}?)" if close else ""
            raise ValueError(
                f"context {name}={raw!r}: expected one of "
                f"{', '.join(m.lower() for m in members)}{hint}"
            )
        return ENUMS[name][str(raw).upper()]
    if name == "tags":
        tags = json.loads(raw) if isinstance(raw, str) else raw
        if not isinstance(tags, dict):
            raise ValueError(f"context tags={raw!r}: expected a JSON object")
        return {str(k): str(v) for k, v in tags.items()}
    if name == "snapshot_windows":
        items = raw.split(",") if isinstance(raw, str) else raw
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(default, bool):
        return as_bool(name, raw)
    if isinstance(default, int):
        text = str(raw).strip()
        if isinstance(raw, bool) or not text.lstrip("-").isdigit():
            raise ValueError(f"context {name}={raw!r}: expected a whole number, e.g. {default}")
        return int(text)
    return str(raw)


def _import_by_arn(scope: Construct, name: str, arn: str) -> Any:
    if name == "encryption_key":
        return kms.Key.from_key_arn(scope, "ContextEncryptionKey", arn)
    if name == "alarm_topic":
        return sns.Topic.from_topic_arn(scope, "ContextAlarmTopic", arn)
    if name == "permission_boundary":
        return iam.ManagedPolicy.from_managed_policy_arn(scope, "ContextBoundary", arn)
    if name == "alerts_bus":
        return events.EventBus.from_event_bus_arn(scope, "ContextAlertsBus", arn)
    return iam.ArnPrincipal(arn)


def props_from_context(scope: Construct, base: ZaeLimiterProps | None = None) -> ZaeLimiterProps:
    """`base` (or the defaults) with every property that is set in `scope`'s context replaced."""
    base = base or ZaeLimiterProps()
    changes: dict[str, Any] = {}
    problems = _unknown_keys(scope)
    for field in dataclasses.fields(ZaeLimiterProps):
        if field.name in ARN_PROPERTIES:
            arn = scope.node.try_get_context(ARN_PROPERTIES[field.name])
            if arn:
                changes[field.name] = _import_by_arn(scope, field.name, str(arn))
            continue
        raw = scope.node.try_get_context(field.name)
        if raw is not None:
            try:
                changes[field.name] = _convert(field.name, getattr(base, field.name), raw)
            except (ValueError, json.JSONDecodeError) as exc:
                problems.append(str(exc))
    if problems:
        raise ValueError("invalid CDK context: " + "; ".join(problems))
    return dataclasses.replace(base, **changes)


def known_keys() -> list[str]:
    """Every context key the app reads."""
    names = [f.name for f in dataclasses.fields(ZaeLimiterProps) if f.name not in ARN_PROPERTIES]
    return sorted([*names, *ARN_PROPERTIES.values(), *APP_KEYS])


def _unknown_keys(scope: Construct) -> list[str]:
    """A message per context key that is none of ours (CDK's own keys are left alone)."""
    known = known_keys()
    problems = []
    for key in sorted(scope.node.get_all_context()):
        if key in known or ":" in key or key.startswith("@") or key in _CDK_KEYS:
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"did you mean {close[0]}?" if close else "see infra/props.py for the names"
        problems.append(f"unknown context key {key!r}: {hint}")
    return problems


#: Context keys the CDK toolkit itself may set without a colon.
_CDK_KEYS = {"cli-telemetry", "acknowledged-issue-numbers", "assetsMetadata", "outdir"}
