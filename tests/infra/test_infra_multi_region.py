"""The construct with `replica_regions` / `witness_region` (docs/multi-region.md): a TableV2
global table with multi-Region strong consistency in three Regions, no TTL, the aggregator in
the deploying Region only (and the sweeper on its schedule), outputs per Region."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template
from cdk_helpers import actions, by_sid, only, render, resources, statements
from test_infra_least_privilege import ALL, ITEMS, RESERVED

from support.iam_check import policies_from_template
from support.iam_eval import Deployment, Request, allowed_kinds, allows
from zae_limiter import schema
from zae_limiter.cdk import ZaeLimiter, ZaeLimiterProps
from zae_limiter.cdk.multi_region import ENV_REPLICA_REGIONS, SWEEP_EVENT
from zae_limiter.dynamo import sequenced


@pytest.fixture(scope="module")
def stacks() -> dict[str, Template]:
    """One app: a stack with two replicas, a stack with a replica and a witness."""
    app = cdk.App()
    env = cdk.Environment(account="111111111111", region="us-east-1")
    built = {}
    for name, replica_regions, witness in (
        ("Replicas", ("us-east-2", "us-west-2"), None),
        ("Witness", ("us-east-2",), "us-west-2"),
    ):
        stack = cdk.Stack(app, name, env=env)
        ZaeLimiter(
            stack,
            "Limiter",
            table_name=f"zl-{name.lower()}",
            replica_regions=replica_regions,
            witness_region=witness,
        )
        built[name] = stack
    return {name: Template.from_stack(stack) for name, stack in built.items()}


@pytest.fixture(scope="module")
def replicas(stacks: dict[str, Template]) -> Template:
    return stacks["Replicas"]


def test_the_table_is_a_global_table_with_strong_consistency_and_no_ttl(
    replicas: Template,
) -> None:
    assert resources(replicas, "AWS::DynamoDB::Table") == {}
    table = only(replicas, "AWS::DynamoDB::GlobalTable")["Properties"]
    assert table["MultiRegionConsistency"] == "STRONG"
    assert sorted(r["Region"] for r in table["Replicas"]) == ["us-east-1", "us-east-2", "us-west-2"]
    assert "TimeToLiveSpecification" not in table  # an MRSC table has no TTL: the sweeper
    assert table["StreamSpecification"] == {"StreamViewType": schema.STREAM_VIEW_TYPE}
    assert {i["IndexName"] for i in table["GlobalSecondaryIndexes"]} == {
        index.name for index in schema.INDEXES
    }
    assert [k["AttributeName"] for k in table["KeySchema"]] == [
        schema.PARTITION_KEY,
        schema.SORT_KEY,
    ]


def test_one_aggregator_in_the_deploying_region_knows_the_regions_and_sweeps(
    replicas: Template,
) -> None:
    functions = resources(replicas, "AWS::Lambda::Function")
    aggregators = [f for f in functions.values() if "aggregator" in json.dumps(f).lower()]
    assert len(resources(replicas, "AWS::Lambda::EventSourceMapping")) == 1
    environment = next(
        f["Properties"]["Environment"]["Variables"]
        for f in aggregators
        if ENV_REPLICA_REGIONS in f["Properties"].get("Environment", {}).get("Variables", {})
    )
    assert render(environment[ENV_REPLICA_REGIONS]) == "<token>,us-east-2,us-west-2"
    rules = [r["Properties"] for r in resources(replicas, "AWS::Events::Rule").values()]
    [rule] = [r for r in rules if json.loads(r["Targets"][0]["Input"]) == SWEEP_EVENT]
    assert rule["ScheduleExpression"] == "rate(5 minutes)"
    policies = resources(replicas, "AWS::IAM::Policy")
    sweeper = [s for p in policies.values() for s in statements(p) if s.get("Sid") == "Sweeper"]
    assert len(sweeper) == 1
    assert {"dynamodb:Scan", "dynamodb:DeleteItem"} <= set(actions(sweeper[0]))


def test_every_region_has_its_outputs_and_the_policies_cover_every_replica(
    replicas: Template,
) -> None:
    outputs = replicas.to_json()["Outputs"]
    for label in ("Deploying", "UsEast2", "UsWest2"):
        assert any(f"{label}TableArn" in name for name in outputs), label
        assert any(f"{label}Endpoint" in name for name in outputs), label
    app_policy = next(
        p for name, p in resources(replicas, "AWS::IAM::ManagedPolicy").items() if "App" in name
    )
    read = by_sid(app_policy)["Read"]
    assert ":dynamodb:*:" in json.dumps(read["Resource"])  # every Region's replica


def test_the_aggregator_may_sweep_every_item_of_the_table_and_nothing_more(
    replicas: Template,
) -> None:
    """The sweep (admin/sweeper.py) deletes every kind of item TTL would, and rolls forward a
    change of any kind a process left half done: the aggregator's `Sweeper` statement lets it
    walk, read, write and delete every item, in every Region's replica. On such a table its
    snapshot writes read and write their markers in batches (usage/snapshot_writes.py), through
    the same statement. Nothing else: no index, no transaction, no table management, no other
    Region's stream (tests/regions/test_mrsc_sweeper.py sends each request of the sweep through this
    policy)."""
    deployment = Deployment(
        account="111111111111", table="zl-replicas", replica_regions=("us-east-2", "us-west-2")
    )
    policy = policies_from_template(replicas.to_json(), deployment)["aggregator"]
    marker = RESERVED["aggregation marker"]
    for region in deployment.regions:
        table = deployment.in_region(region).table_arn
        for action in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
            assert allowed_kinds(policy, f"dynamodb:{action}", table, ITEMS) == ALL, action
        for action, key in [
            ("Scan", None),
            ("Query", sequenced.JOURNAL_PK),
            ("BatchGetItem", marker),
            ("BatchWriteItem", marker),
        ]:
            assert allows(policy, Request(f"dynamodb:{action}", table, key)), (region, action)
        for action in ("TransactWriteItems", "UpdateTable", "DeleteTable", "DescribeTable"):
            assert not allows(policy, Request(f"dynamodb:{action}", table, None)), action
        for index in schema.INDEXES:  # neither the sweep nor the snapshot writes use one
            resource = f"{table}/index/{index.name}"
            assert not allows(policy, Request("dynamodb:Query", resource, "x")), index.name
    replica = deployment.in_region("us-east-2")
    assert allows(policy, Request("dynamodb:GetRecords", deployment.stream_arn, None))
    assert not allows(policy, Request("dynamodb:GetRecords", replica.stream_arn, None))


def test_two_replicas_or_one_and_a_witness_and_nothing_else(stacks: dict[str, Template]) -> None:
    table = only(stacks["Witness"], "AWS::DynamoDB::GlobalTable")["Properties"]
    assert table["GlobalTableWitnesses"] == [{"Region": "us-west-2"}]
    assert len(table["Replicas"]) == 2
    for bad in (
        {"replica_regions": ("us-east-2",)},
        {"witness_region": "us-west-2"},
        {"replica_regions": ("us-east-2", "us-west-2"), "witness_region": "eu-west-1"},
        {"replica_regions": ("us-east-2", "us-east-2")},
    ):
        with pytest.raises(ValueError, match="Region"):
            ZaeLimiterProps(**bad)
