"""Least privilege: each policy evaluated against the key layout (`zae_limiter.dynamo.keys`).

For every policy the construct makes (and every `grant_*`), the items each write action may
touch are listed exactly, by kind; every other kind of item is denied. The evaluator
(`iam_eval`) reads the synthesized statements, so a change to a condition or to the key layout
shows up here.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from cdk_helpers import logical_id, resources, statements
from cdk_stacks import Synthesized
from iam_eval import allowed_kinds

from zae_limiter import schema
from zae_limiter.cdk import ZaeLimiter
from zae_limiter.cdk.access import NAMESPACE_TAG
from zae_limiter.dynamo import keys, records

NS = records.new_namespace_id()
OTHER = records.new_namespace_id()
TAGS = {NAMESPACE_TAG: NS}


def partition(item: dict[str, str]) -> str:
    return item[schema.PARTITION_KEY]


def namespaced_items(ns: str) -> dict[str, str]:
    """One item of every kind that lives in namespace `ns`, by kind."""
    return {
        "bucket": partition(keys.bucket(ns, "user-1", "search", 0)),
        "bucket, shard 3": partition(keys.bucket(ns, "user-1", "search", 3)),
        "bucket of entity U": partition(keys.bucket(ns, "U", "B", 0)),
        "system config": partition(keys.system_config(ns)),
        "resource config": partition(keys.resource_config(ns, "search")),
        "entity": partition(keys.entity_meta(ns, "user-1")),
        "entity named B": partition(keys.entity_meta(ns, "B")),
        "entity config": partition(keys.entity_config(ns, "user-1", "search")),
        "usage snapshot": partition(
            keys.usage_snapshot(ns, "user-1", "search", "hourly", "2026-01-01T00:00:00Z")
        ),
        "audit event": partition(keys.audit_event(ns, "user-1", "01JAUDIT")),
        "operation record": partition(keys.operation_record(ns, "idem-1")),
        "manifest state": partition(keys.manifest_state(ns)),
    }


RESERVED = {
    "version record": partition(keys.version_record()),
    "namespace by name": partition(keys.namespace_by_name("default")),
    "namespace by id": partition(keys.namespace_by_id(NS)),
    "aggregation marker": partition(keys.aggregation_marker("event-1")),
    "migration progress": partition(keys.migration_progress("m-1")),
}
ITEMS = {
    **namespaced_items(NS),
    **{f"other: {kind}": pk for kind, pk in namespaced_items(OTHER).items()},
    **RESERVED,
}
ALL = set(ITEMS)
MINE = set(namespaced_items(NS))
OTHERS = {f"other: {kind}" for kind in namespaced_items(OTHER)}
BUCKETS = {"bucket", "bucket, shard 3", "bucket of entity U"}
WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")


def table_arn(template: Any) -> dict[str, Any]:
    return {"Fn::GetAtt": [logical_id(template, "AWS::DynamoDB::Table", "Table"), "Arn"]}


def managed(template: Any, part: str) -> list[dict[str, Any]]:
    found = resources(template, "AWS::IAM::ManagedPolicy")
    listed: list[dict[str, Any]] = statements(
        found[logical_id(template, "AWS::IAM::ManagedPolicy", part)]
    )
    return listed


def role_statements(template: Any, part: str) -> list[dict[str, Any]]:
    found = resources(template, "AWS::IAM::Policy")
    listed: list[dict[str, Any]] = statements(found[logical_id(template, "AWS::IAM::Policy", part)])
    return listed


def writable(policy: list[dict[str, Any]], template: Any, action: str, **kw: Any) -> set[str]:
    kinds: set[str] = allowed_kinds(policy, action, table_arn(template), ITEMS, **kw)
    return kinds


def test_the_evaluator_tells_allowed_from_denied() -> None:
    """A statement on bucket keys allows a bucket and denies the version record; a missing
    principal tag allows nothing; a condition the evaluator does not know fails loudly."""
    statement = {
        "Effect": "Allow",
        "Action": ["dynamodb:PutItem"],
        "Resource": "arn",
        "Condition": {
            "ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["${aws:PrincipalTag/t}#B#*"]}
        },
    }
    items = {"bucket": partition(keys.bucket(NS, "e", "r")), "version": RESERVED["version record"]}
    assert allowed_kinds([statement], "dynamodb:PutItem", "arn", items, {"t": NS}) == {"bucket"}
    assert allowed_kinds([statement], "dynamodb:PutItem", "arn", items, {}) == set()
    assert allowed_kinds([statement], "dynamodb:GetItem", "arn", items, {"t": NS}) == set()
    odd = {**statement, "Condition": {"StringEquals": {"aws:SourceVpc": "vpc-1"}}}
    with pytest.raises(AssertionError, match="does not know"):
        allowed_kinds([odd], "dynamodb:PutItem", "arn", items)


@pytest.mark.parametrize("action", WRITES)
def test_app_writes_bucket_items_only(synthesized: Synthesized, action: str) -> None:
    template = synthesized.default
    policy = managed(template, "AppPolicy")
    expected = (
        set() if action.endswith("DeleteItem") else BUCKETS | {f"other: {kind}" for kind in BUCKETS}
    )
    assert writable(policy, template, action) == expected
    # Reads stay open: the acquire path reads config, entities and the version record.
    assert writable(policy, template, "dynamodb:GetItem") == ALL


@pytest.mark.parametrize("action", WRITES)
def test_namespace_scoped_app_writes_its_own_buckets_only(
    synthesized: Synthesized, action: str
) -> None:
    template = synthesized.full
    policy = managed(template, "AppNamespacePolicy")
    expected = set() if action.endswith("DeleteItem") else BUCKETS
    assert writable(policy, template, action, tags=TAGS) == expected
    assert writable(policy, template, "dynamodb:GetItem", tags=TAGS) == (
        MINE | {"version record", "namespace by name", "namespace by id"}
    )
    assert writable(policy, template, action, tags={}) == set()  # untagged: nothing


@pytest.mark.parametrize("action", WRITES)
def test_admin_writes_every_item(synthesized: Synthesized, action: str) -> None:
    template = synthesized.default
    assert writable(managed(template, "AdminPolicy"), template, action) == ALL


@pytest.mark.parametrize("action", WRITES)
def test_namespace_scoped_admin_writes_its_namespace_and_the_version_minimum(
    synthesized: Synthesized, action: str
) -> None:
    template = synthesized.full
    policy = managed(template, "AdminNamespacePolicy")
    ratchet = {"version record"} if action.endswith("UpdateItem") else set()
    assert writable(policy, template, action, tags=TAGS) == MINE | ratchet


@pytest.mark.parametrize("action", (*WRITES, "dynamodb:BatchWriteItem"))
def test_read_only_writes_nothing(synthesized: Synthesized, action: str) -> None:
    for template, part, tags in (
        (synthesized.default, "ReadonlyPolicy", {}),
        (synthesized.full, "ReadonlyNamespacePolicy", TAGS),
    ):
        assert writable(managed(template, part), template, action, tags=tags) == set()
    template = synthesized.default
    assert writable(managed(template, "ReadonlyPolicy"), template, "dynamodb:GetItem") == ALL


@pytest.mark.parametrize("action", WRITES)
def test_aggregator_writes_snapshots_and_markers_only(
    synthesized: Synthesized, action: str
) -> None:
    template = synthesized.default
    policy = role_statements(template, "AggregatorRoleDefaultPolicy")
    expected = (
        set()
        if action.endswith("DeleteItem")
        else {"usage snapshot", "other: usage snapshot", "aggregation marker"}
    )
    assert writable(policy, template, action) == expected
    assert writable(policy, template, "dynamodb:GetItem") == {
        "version record",
        "namespace by id",
    }


def test_version_record_step_writes_reserved_items_only(synthesized: Synthesized) -> None:
    template = synthesized.default
    policy = role_statements(template, "VersionRecordRoleDefaultPolicy")
    for action in ("dynamodb:PutItem", "dynamodb:UpdateItem"):
        assert writable(policy, template, action) == {
            "version record",
            "namespace by name",
            "namespace by id",
        }


def test_no_policy_grants_kms_encrypt_or_reencrypt(synthesized: Synthesized) -> None:
    template = synthesized.full
    every = [
        action
        for kind in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy")
        for policy in resources(template, kind).values()
        for s in statements(policy)
        for action in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
    ]
    kms = sorted({a for a in every if a.startswith("kms:")})
    assert kms == ["kms:Decrypt", "kms:DescribeKey", "kms:GenerateDataKey"]


def test_grants_give_a_role_what_the_managed_policies_give() -> None:
    """`grant_acquire` / `grant_admin` / `grant_read` add the app / admin / readonly
    statements to the grantee's own policy (a user's role in the user's own stack)."""
    app = cdk.App()
    stack = cdk.Stack(app, "UserStack")
    limiter = ZaeLimiter(stack, "Limiter", table_name="zl-grants", create_policies=False)
    grantees = {}
    for name, grant in (
        ("Service", limiter.grant_acquire),
        ("Operator", limiter.grant_admin),
        ("Analyst", limiter.grant_read),
    ):
        role = iam.Role(stack, name, assumed_by=iam.AccountRootPrincipal())
        assert grant(role).success
        grantees[name] = role
    scoped = iam.Role(stack, "Tenant", assumed_by=iam.AccountRootPrincipal())
    limiter.grant_acquire(scoped, namespace_scoped=True)
    template = cdk.assertions.Template.from_stack(stack)

    def policy(name: str) -> list[dict[str, Any]]:
        return role_statements(template, f"{name}DefaultPolicy")

    assert not resources(template, "AWS::IAM::ManagedPolicy")
    put = "dynamodb:PutItem"
    assert writable(policy("Service"), template, put) == BUCKETS | {
        f"other: {kind}" for kind in BUCKETS
    }
    assert writable(policy("Service"), template, "dynamodb:GetItem") == ALL
    assert writable(policy("Operator"), template, put) == ALL
    assert writable(policy("Analyst"), template, put) == set()
    assert writable(policy("Analyst"), template, "dynamodb:GetItem") == ALL
    assert writable(policy("Tenant"), template, put, tags=TAGS) == BUCKETS
