"""Least privilege: each policy evaluated against the key layout (`zae_limiter.dynamo.keys`).

For every policy the construct makes (and every `grant_*`), the items each write action may
touch are listed exactly, by kind; every other kind of item is denied. The evaluator
(`iam_eval`) reads the synthesized statements, so a change to a condition or to the key layout
shows up here.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk.assertions import Template
from cdk_helpers import logical_id, resources, statements
from cdk_stacks import Synthesized

from support.iam_check import policies_from_template
from support.iam_eval import Deployment, Request, allowed_kinds, allows, denied_requests
from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository, schema
from zae_limiter.cdk import ZaeLimiter, ZaeLimiterProps, ZaeLimiterStack
from zae_limiter.cdk.access import NAMESPACE_TAG
from zae_limiter.dynamo import keys, records
from zae_limiter.dynamo.transport import Transport

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
        "entity config resources": keys.entity_config_resources_partition(ns),
        "usage snapshot": partition(
            keys.usage_snapshot(ns, "user-1", "search", "hourly", "2026-01-01T00:00:00Z")
        ),
        "audit event": partition(keys.audit_event(ns, "user-1", "01JAUDIT")),
        "alert": partition(keys.alert_item(ns, "user-1", "search", "rpm", 0, 80, 0)),
        "usage tombstone": partition(keys.usage_tombstone(ns, "user-1")),
        "operation record": partition(keys.operation_record(ns, "idem-1")),
        "manifest state": partition(keys.manifest_state(ns)),
    }


RESERVED = {
    "version record": partition(keys.version_record()),
    "namespace by name": partition(keys.namespace_by_name("default")),
    "namespace by id": partition(keys.namespace_by_id(NS)),
    "aggregation marker": partition(keys.aggregation_marker("event-1")),
    "migration progress": partition(keys.migration_progress("m-1")),
    "held crossing": partition(keys.held_crossing(NS, "user-1", 0, "search#rpm#0#0080")),
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
#: What the acquire path reads in its namespace (and nothing else of it).
ACQUIRE_READS = BUCKETS | {
    "system config",
    "resource config",
    "entity",
    "entity named B",
    "entity config",
    "entity config resources",
}
REGISTRY = {"version record", "namespace by name", "namespace by id"}
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
    # Reads: what the acquire path reads (config, entities, buckets, registry), in any namespace.
    for read in ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"):
        assert writable(policy, template, read) == (
            ACQUIRE_READS | {f"other: {kind}" for kind in ACQUIRE_READS} | REGISTRY
        )


@pytest.mark.parametrize("action", WRITES)
def test_namespace_scoped_app_writes_its_own_buckets_only(
    synthesized: Synthesized, action: str
) -> None:
    template = synthesized.full
    policy = managed(template, "AppNamespacePolicy")
    expected = set() if action.endswith("DeleteItem") else BUCKETS
    assert writable(policy, template, action, tags=TAGS) == expected
    assert writable(policy, template, "dynamodb:GetItem", tags=TAGS) == ACQUIRE_READS | REGISTRY
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
def test_aggregator_writes_snapshots_markers_and_alerts_only(
    synthesized: Synthesized, action: str
) -> None:
    """Usage snapshots, aggregation markers and threshold alerts (stored whether or not a bus
    publishes them), in any namespace; it reads the version record, namespace names and deleted
    entities' usage tombstones, which each transaction also checks."""
    for template in (synthesized.default, synthesized.full):
        policy = role_statements(template, "AggregatorRoleDefaultPolicy")
        expected = (
            set()  # a held crossing is ended by a put, never deleted (alerts.held)
            if action.endswith("DeleteItem")
            else {
                "usage snapshot",
                "other: usage snapshot",
                "alert",
                "other: alert",
                "aggregation marker",
            }
            | ({"held crossing"} if action.endswith("PutItem") else set())
        )
        assert writable(policy, template, action) == expected
        assert writable(policy, template, "dynamodb:GetItem") == {
            "version record",
            "namespace by id",
            "usage tombstone",
            "other: usage tombstone",
            "held crossing",  # read again when a write of it meets a newer state
        } | {kind for kind in ALL if "bucket" in kind}  # the item of a due held crossing
        assert writable(policy, template, "dynamodb:ConditionCheckItem") == {
            "usage tombstone",
            "other: usage tombstone",
        }


def test_the_lambda_service_may_do_what_it_does_with_the_aggregators_role() -> None:
    """The event source mapping reads the stream and sends what keeps failing to the DLQ with
    the function's role; the function writes its logs, archives to S3 and publishes alerts."""
    deployment = Deployment()
    template = Template.from_stack(
        ZaeLimiterStack(
            cdk.App(),
            "LambdaService",
            props=ZaeLimiterProps(enable_alerts=True, enable_audit_archive=True),
        )
    ).to_json()
    policy = policies_from_template(template, deployment)["aggregator"]
    for action, resource in [
        ("dynamodb:ListStreams", "*"),
        ("dynamodb:DescribeStream", deployment.stream_arn),
        ("dynamodb:GetShardIterator", deployment.stream_arn),
        ("dynamodb:GetRecords", deployment.stream_arn),
        ("sqs:SendMessage", deployment.queue_arn),
        ("sqs:GetQueueAttributes", deployment.queue_arn),
        ("s3:PutObject", f"{deployment.bucket_arn}/audit/year=2026/month=01/day=05/1-2.jsonl.gz"),
        ("events:PutEvents", deployment.bus_arn),
    ]:
        assert allows(policy, Request(action, resource, None)), (action, resource)
    for action, resource in [
        ("s3:PutObject", f"{deployment.bucket_arn}/elsewhere/object"),
        ("sqs:ReceiveMessage", deployment.queue_arn),
        ("lambda:UpdateFunctionCode", deployment.function_arn),
        ("dynamodb:GetRecords", deployment.table_arn),
    ]:
        assert not allows(policy, Request(action, resource, None)), (action, resource)


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
    assert "usage snapshot" not in writable(policy("Service"), template, "dynamodb:GetItem")
    assert writable(policy("Operator"), template, put) == ALL
    assert writable(policy("Analyst"), template, put) == set()
    assert writable(policy("Analyst"), template, "dynamodb:GetItem") == ALL
    assert writable(policy("Tenant"), template, put, tags=TAGS) == BUCKETS


def index_arn(template: Any, name: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [table_arn(template), f"/index/{name}"]]}


def index_partitions(ns: str) -> dict[str, tuple[str, str]]:
    """One index partition of every kind: kind -> (index, partition key value)."""
    return {
        "children": (keys.GSI1, keys.children_index_key(ns, "org-1")),
        "audit log": (keys.GSI1, keys.audit_log_index_key(ns)),
        "resource buckets": (keys.GSI2, keys.resource_buckets_index_key(ns, "search")),
        "resource usage": (keys.GSI2, keys.resource_usage_index_key(ns, "search")),
        "entity buckets": (keys.GSI3, keys.entity_buckets_index_key(ns, "user-1")),
        "entities with config": (keys.GSI3, keys.entity_config_index_key(ns, "search")),
        "namespace items": (keys.GSI4, ns),
        "entity alerts": (keys.GSI3, keys.entity_alerts_index_key(ns, "user-1")),
        "namespace alerts": (keys.GSI1, keys.namespace_alerts_index_key(ns)),
    }


def queryable(policy: list[dict[str, Any]], template: Any, tags: dict[str, str]) -> set[str]:
    """The index partitions (of NS and OTHER) `policy` lets a principal with `tags` Query."""
    found = set()
    for prefix, ns in (("", NS), ("other: ", OTHER)):
        for kind, (index, value) in index_partitions(ns).items():
            request = Request("dynamodb:Query", index_arn(template, index), value, tags)
            if allows(policy, request):
                found.add(prefix + kind)
    return found


def test_app_reads_no_usage_audit_or_index(synthesized: Synthesized) -> None:
    """The acquire path reads config, entity, registry and bucket items by key: the `app`
    policies allow no index at all, no usage snapshot, audit event, operation or manifest
    record, and (namespace-scoped) nothing of another namespace."""
    for template, part, tags in (
        (synthesized.default, "AppPolicy", {}),
        (synthesized.full, "AppNamespacePolicy", TAGS),
    ):
        policy = managed(template, part)
        assert queryable(policy, template, tags) == set()
        for read in ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan"):
            seen = writable(policy, template, read, tags=tags)
            assert not seen & {"usage snapshot", "audit event", "operation record"}, read
            assert not seen & {"manifest state", "other: audit event"}, read
    scoped = managed(synthesized.full, "AppNamespacePolicy")
    assert not writable(scoped, synthesized.full, "dynamodb:GetItem", tags=TAGS) & OTHERS
    assert writable(scoped, synthesized.full, "dynamodb:UpdateItem", tags=TAGS) == BUCKETS


def test_usage_audit_and_alerts_policies_read_their_items_only(synthesized: Synthesized) -> None:
    """Each reads its kind of item and its index partitions, and nothing else: the alerts
    policy's namespace listing reads the namespace's own alert partition of GSI1, never the
    namespace's keys (GSI4)."""
    for template, suffix, tags, others in (
        (synthesized.default, "", {}, True),
        (synthesized.full, "Namespace", TAGS, False),
    ):
        usage = managed(template, f"Usage{suffix}Policy")
        audit = managed(template, f"Audit{suffix}Policy")
        alerts = managed(template, f"Alerts{suffix}Policy")
        mine = {"usage snapshot"} | ({"other: usage snapshot"} if others else set())
        assert writable(usage, template, "dynamodb:GetItem", tags=tags) == mine | REGISTRY
        assert queryable(usage, template, tags) == {"resource usage"} | (
            {"other: resource usage"} if others else set()
        )
        mine = {"audit event"} | ({"other: audit event"} if others else set())
        assert writable(audit, template, "dynamodb:Query", tags=tags) == mine | REGISTRY
        assert queryable(audit, template, tags) == {"audit log"} | (
            {"other: audit log"} if others else set()
        )
        mine = {"alert"} | ({"other: alert"} if others else set())
        assert writable(alerts, template, "dynamodb:BatchGetItem", tags=tags) == mine | REGISTRY
        found = {"entity alerts", "namespace alerts"}
        assert queryable(alerts, template, tags) == found | (
            {f"other: {kind}" for kind in found} if others else set()
        )
        for policy in (usage, audit, alerts):
            for action in (*WRITES, "dynamodb:BatchWriteItem"):
                assert writable(policy, template, action, tags=tags) == set()


def test_grants_for_usage_audit_and_alerts_match_their_policies() -> None:
    app = cdk.App()
    stack = cdk.Stack(app, "ReportsStack")
    limiter = ZaeLimiter(stack, "Limiter", table_name="zl-reports", create_policies=False)
    for name, grant in (
        ("Billing", limiter.grant_read_usage),
        ("Auditor", limiter.grant_read_audit),
        ("OnCall", limiter.grant_read_alerts),
    ):
        role = iam.Role(stack, name, assumed_by=iam.AccountRootPrincipal())
        assert grant(role, namespace_scoped=True).success
    template = cdk.assertions.Template.from_stack(stack)
    billing = role_statements(template, "BillingDefaultPolicy")
    auditor = role_statements(template, "AuditorDefaultPolicy")
    get = "dynamodb:GetItem"
    assert writable(billing, template, get, tags=TAGS) == {"usage snapshot"} | REGISTRY
    assert writable(auditor, template, get, tags=TAGS) == {"audit event"} | REGISTRY
    assert queryable(billing, template, TAGS) == {"resource usage"}
    assert queryable(auditor, template, TAGS) == {"audit log"}
    on_call = role_statements(template, "OnCallDefaultPolicy")
    assert writable(on_call, template, get, tags=TAGS) == {"alert"} | REGISTRY
    assert queryable(on_call, template, TAGS) == {"entity alerts", "namespace alerts"}
    for action in (*WRITES, "dynamodb:BatchWriteItem", "dynamodb:Scan"):
        assert writable(on_call, template, action, tags=TAGS) == set()


async def test_the_acquire_path_needs_nothing_the_app_policy_refuses(
    synthesized: Synthesized, repo: Repository, clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every request a fresh process makes to open the table and acquire (one resource, a
    cascade to the parent, `also=` a quota, an adjust, a refusal, a check of what is
    available, a lease given back by an exception), as sent on the wire, is allowed by the
    synthesized `app` policy, unscoped and namespace-scoped."""
    await repo.set_resource_defaults("search", [Limit.per_minute("rpm", 3)])
    await repo.set_resource_defaults("budget", [Limit.quota("weekly", 1000, cron="0 0 * * 1")])
    await repo.set_resource_cascade("search", True)
    await repo.create_entity("org-1")
    await repo.create_entity("user-1", parent_id="org-1")
    await repo.set_limits("org-1", [Limit.per_minute("rpm", 100)], resource="search")
    calls: list[tuple[str, dict[str, Any]]] = []
    send = Transport.call

    async def recorded(self: Transport, operation: str, request: dict[str, Any], **kw: Any) -> Any:
        calls.append((operation, copy.deepcopy(request)))
        return await send(self, operation, request, **kw)

    monkeypatch.setattr(Transport, "call", recorded)
    table = repo.table_name
    endpoint = repo.transport.client.meta.endpoint_url
    app = await Repository.open(table=table, endpoint_url=endpoint, clock=clock)
    try:
        limiter = RateLimiter(app)
        async with limiter.acquire(
            "user-1", "search", {"rpm": 1}, also={"budget": {"weekly": 10}}
        ) as lease:
            await lease.adjust(rpm=1)
        with pytest.raises(RuntimeError):
            async with limiter.acquire("user-2", "search", {"rpm": 1}):
                raise RuntimeError("the handler failed: the debit is given back")
        with pytest.raises(RateLimitExceeded):
            async with limiter.acquire("user-2", "search", {"rpm": 5}):
                pass
        await limiter.available("user-1", "search")
    finally:
        await app.close()
    monkeypatch.undo()
    operations = {operation for operation, _ in calls}
    assert {"GetItem", "Query", "UpdateItem"} <= operations
    template = synthesized.default
    for part, template, tags in (
        ("AppPolicy", synthesized.default, {}),
        ("AppNamespacePolicy", synthesized.full, {NAMESPACE_TAG: repo.namespace_id}),
    ):
        denied = denied_requests(
            managed(template, part),
            calls,
            table_arn(template),
            functools.partial(index_arn, template),
            tags,
        )
        assert not denied, f"{part} refuses {denied}"
