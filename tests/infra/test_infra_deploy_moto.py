"""End to end: deploy the synthesized stack to moto with CloudFormation, then use the table.

moto implements every resource type of the stack except `AWS::CloudWatch::Alarm`, so the stack
is synthesized with `enable_alarms=False` (alarms are checked on the template instead). moto runs
Lambda code only in Docker; here its invoke hook is replaced so the version-record custom resource
runs for real, in a `python -S` subprocess that sees only its unzipped asset and boto3 (as on
Lambda), against the moto server, and answers CloudFormation's response URL itself. Stream
deliveries to the aggregator are recorded but not run (the aggregator has its own tests).
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import boto3
import moto.settings
import pytest
from aws_cdk import aws_lambda as lambda_
from lambda_sim import LAMBDA_RUNTIME_PACKAGES, provided_packages, run_python
from moto.awslambda.models import LambdaFunction
from moto.core.utils import utcnow
from moto.server import ThreadedMotoServer
from moto.ssm.models import Parameter, ssm_backends

from zae_limiter import schema, versioning
from zae_limiter.cdk import ZaeLimiterProps, ZaeLimiterStack
from zae_limiter.cdk.aggregator import powertools_parameter_name
from zae_limiter.cdk.version_record import RESOURCE_TYPE
from zae_limiter.dynamo import codec, keys

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
BOOTSTRAP_QUALIFIER = "hnb659fds"


@dataclass
class Invocations:
    """What the patched Lambda runtime did: custom resource runs and stream deliveries."""

    custom_resource: list[Any] = field(default_factory=list)
    stream_events: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def moto_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # Custom resource response URLs must point at this server (moto defaults to a Docker host).
    monkeypatch.setattr(moto.settings, "moto_server_host", lambda: f"http://{host}")
    monkeypatch.setenv("MOTO_PORT", str(port))
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def fake_lambda_runtime(
    monkeypatch: pytest.MonkeyPatch, endpoint: str, workdir: Path
) -> Invocations:
    """Replace moto's Docker-based invoke: run custom resources, record stream events."""
    invocations = Invocations()
    provided = provided_packages(workdir / "lambda-runtime", LAMBDA_RUNTIME_PACKAGES)

    def invoke(function: LambdaFunction, event: Any = None) -> tuple[str, bool, str]:
        if not (isinstance(event, dict) and "ResponseURL" in event):
            invocations.stream_events.append(event)
            return "", False, ""
        bundle = workdir / f"code-{len(invocations.custom_resource)}"
        with zipfile.ZipFile(io.BytesIO(function.code_bytes)) as archive:
            archive.extractall(bundle)
        module, handler = function.handler.split(".")
        result = run_python(
            bundle,
            provided,
            f"import json, sys, {module}; {module}.{handler}(json.load(sys.stdin), None)",
            env={
                **function.environment_vars,
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
            },
            stdin=json.dumps(event),
        )
        invocations.custom_resource.append(result)
        return result.stdout, result.returncode != 0, result.stderr

    monkeypatch.setattr(LambdaFunction, "_invoke_lambda", invoke)
    return invocations


def synthesize(outdir: Path, stack_name: str, table_name: str) -> dict[str, Any]:
    """Synthesize the stack with alarms left out; returns the template."""
    app = cdk.App(outdir=str(outdir))
    ZaeLimiterStack(
        app,
        stack_name,
        props=ZaeLimiterProps(table_name=table_name, enable_alarms=False),
    )
    assembly = app.synth()
    template: dict[str, Any] = assembly.get_stack_by_name(stack_name).template
    return template


def publish_assets(outdir: Path, stack_name: str, s3: Any, ssm: Any) -> None:
    """What `cdk bootstrap` + asset publishing would do: the version parameter and the zips;
    and the Powertools layer's public parameter, which AWS provides in every commercial region."""
    ssm.put_parameter(
        Name=f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version", Value="30", Type="String"
    )
    # A reserved (`/aws/...`) name: the API refuses it, so it goes into moto's store directly.
    name = powertools_parameter_name(lambda_.Architecture.ARM_64)
    ssm_backends[ACCOUNT][REGION]._parameters[name].append(
        Parameter(
            account_id=ACCOUNT,
            name=name,
            value=f"arn:aws:lambda:{REGION}:017000801446:layer:Powertools-arm64:1",
            parameter_type="String",
            description=None,
            allowed_pattern=None,
            keyid=None,
            last_modified_date=utcnow(),
            version=1,
            data_type="text",
        )
    )
    bucket = f"cdk-{BOOTSTRAP_QUALIFIER}-assets-{ACCOUNT}-{REGION}"
    s3.create_bucket(Bucket=bucket)
    manifest = json.loads((outdir / f"{stack_name}.assets.json").read_text())
    for asset in manifest["files"].values():
        source = outdir / asset["source"]["path"]
        if asset["source"].get("packaging") != "zip":
            continue
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path in sorted(source.rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(source).as_posix())
        for destination in asset["destinations"].values():
            s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=buffer.getvalue())


def wait_for_stack(
    cloudformation: Any, stack_name: str, invocations: Invocations, timeout: float = 60
) -> dict[str, Any]:
    """The stack once it is no longer in progress, or a few seconds after the custom resource
    process exited without completing it (moto ignores FAILED answers), or at the timeout."""
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    while True:
        (stack,) = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        now = time.monotonic()
        if invocations.custom_resource and exited_at is None:
            exited_at = now
        settled = not stack["StackStatus"].endswith("IN_PROGRESS")
        if settled and invocations.custom_resource:
            return dict(stack)
        if now > deadline or (exited_at is not None and now - exited_at > 5):
            return dict(stack)
        time.sleep(0.2)


@pytest.mark.filterwarnings("ignore:Tried to parse AWS")  # moto lacks AWS::SQS::QueuePolicy
async def test_deploy_to_moto_then_acquire(
    moto_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_name = f"ZaeLimiterE2E{int(time.time() * 1000)}"
    table_name = f"zl-e2e-{int(time.time() * 1000)}"
    outdir = tmp_path / "cdk.out"
    template = synthesize(outdir, stack_name, table_name)
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]

    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=moto_server)

    cloudformation, dynamodb = client("cloudformation"), client("dynamodb")
    publish_assets(outdir, stack_name, client("s3"), client("ssm"))
    invocations = fake_lambda_runtime(monkeypatch, moto_server, tmp_path)

    cloudformation.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(template),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    stack = wait_for_stack(cloudformation, stack_name, invocations)
    runs = "\n".join(r.stdout + r.stderr for r in invocations.custom_resource)
    assert stack["StackStatus"] == "CREATE_COMPLETE", f"{stack}\n--- custom resource:\n{runs}"
    assert [r.returncode for r in invocations.custom_resource] == [0], runs

    # The table, as the schema module defines it.
    table = dynamodb.describe_table(TableName=table_name)["Table"]
    assert table["KeySchema"] == [
        {"AttributeName": schema.PARTITION_KEY, "KeyType": "HASH"},
        {"AttributeName": schema.SORT_KEY, "KeyType": "RANGE"},
    ]
    assert sorted(i["IndexName"] for i in table["GlobalSecondaryIndexes"]) == sorted(
        i.name for i in schema.INDEXES
    )
    assert table["StreamSpecification"] == {
        "StreamEnabled": True,
        "StreamViewType": schema.STREAM_VIEW_TYPE,
    }

    # The custom resource ran the bundled code: version record and `default` namespace.
    resources = cloudformation.list_stack_resources(StackName=stack_name)
    physical = {r["LogicalResourceId"]: r for r in resources["StackResourceSummaries"]}
    aggregator_name = next(
        r["PhysicalResourceId"]
        for lid, r in physical.items()
        if r["ResourceType"] == "AWS::Lambda::Function" and "AggregatorFunction" in lid
    )
    assert any(r["ResourceType"] == RESOURCE_TYPE for r in physical.values())
    item = dynamodb.get_item(
        TableName=table_name, Key=codec.encode_item(keys.version_record()), ConsistentRead=True
    )
    record = codec.decode_item(item.get("Item"))
    assert record is not None
    assert record["aggregator_version"] == versioning.LIBRARY_VERSION
    assert record["schema_version"] == schema.SCHEMA_VERSION
    assert record["updated_by"] == f"cdk:{versioning.LIBRARY_VERSION}"
    assert record["aggregator_function"] == aggregator_name
    dlq_url = next(
        r["PhysicalResourceId"] for r in physical.values() if r["ResourceType"] == "AWS::SQS::Queue"
    )
    assert record["aggregator_dlq_url"] == dlq_url
    mapping = next(
        r for r in physical.values() if r["ResourceType"] == "AWS::Lambda::EventSourceMapping"
    )
    assert mapping["ResourceStatus"] == "CREATE_COMPLETE"

    # The runtime library opens the deployed table and admits a request.
    from zae_limiter import Limit, RateLimiter, Repository

    daily = [Limit.per_day("units", 1000)]
    repo = await Repository.open(table=table_name, endpoint_url=moto_server, region=REGION)
    async with RateLimiter(repo) as limiter:
        async with limiter.acquire("user-1", "api", {"units": 10}, limits=daily):
            pass
        available = await limiter.available("user-1", "api", limits=daily)
    assert available == {"units": 990}
    buckets = dynamodb.scan(
        TableName=table_name,
        FilterExpression="SK = :b",
        ExpressionAttributeValues={":b": {"S": keys.BUCKET}},
    )
    assert buckets["Count"] >= 1
    # The bucket write reached the aggregator through the stream event source.
    delivered = [
        record["dynamodb"]["Keys"][schema.SORT_KEY]["S"]
        for event in invocations.stream_events
        for record in event.get("Records", [])
    ]
    assert keys.BUCKET in delivered
