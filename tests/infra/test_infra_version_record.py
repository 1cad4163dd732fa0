"""The version-record custom resource (writer and CloudFormation answer), on moto in process; each
request it sends is checked against the version-record role's synthesized policy."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import ModuleType
from typing import Any, ClassVar

import boto3
import pytest
from moto import mock_aws

from zae_limiter import schema, versioning
from zae_limiter.cdk.paths import VERSION_RECORD_DIR
from zae_limiter.dynamo import codec, keys, records

TABLE = "zl-version-record"
#: Every request the writer sends is one the version-record role's synthesized policy allows.
pytestmark = pytest.mark.usefixtures("iam_checked")


def _load(module_name: str, file_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, VERSION_RECORD_DIR / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (and the handler's import) look it up there
    spec.loader.exec_module(module)
    return module


# The handler imports `record_writer` by that name, as it does in the Lambda bundle.
writer = _load("record_writer", "record_writer.py")
handler = _load("zae_version_record_handler", "handler.py")


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(**schema.create_table_request(TABLE))
        yield dynamodb


def properties(**overrides: Any) -> dict[str, str]:
    """Resource properties as CloudFormation delivers them: every value a string."""
    values = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:vr",
        "TableName": TABLE,
        "AggregatorVersion": versioning.LIBRARY_VERSION,
        "SchemaVersion": schema.SCHEMA_VERSION,
        "AggregatorFunction": "zl-aggregator",
        "DeadLetterQueueUrl": "https://sqs.us-east-1.amazonaws.com/123456789012/zl-dlq",
        "AllowAggregatorDowngrade": "false",
        "AuditRetentionDays": "90",
        "UsageRetentionDays": "30",
    }
    values.update(overrides)
    return values


def event(request_type: str = "Create", **overrides: Any) -> dict[str, Any]:
    found: dict[str, Any] = {
        "RequestType": request_type,
        "ResponseURL": "http://127.0.0.1:9/unused",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/zl/1",
        "RequestId": "req-1",
        "LogicalResourceId": "VersionRecord",
        "ResourceType": "Custom::ZaeLimiterVersionRecord",
        "ResourceProperties": properties(**overrides),
    }
    if request_type != "Create":
        found["PhysicalResourceId"] = f"{TABLE}/version-record"
    return found


def read(client: Any, key: dict[str, str]) -> dict[str, Any] | None:
    item = client.get_item(TableName=TABLE, Key=codec.encode_item(key), ConsistentRead=True)
    return codec.decode_item(item.get("Item"))


def set_record(client: Any, **fields: Any) -> None:
    item = records.version_record_item(
        schema_version=fields.pop("schema_version", schema.SCHEMA_VERSION),
        aggregator_version=fields.pop("aggregator_version", "0.17.0"),
        aggregator_function=None,
        client_min_version=fields.pop("client_min_version", "0.0.0"),
        updated_at="2026-01-01T00:00:00.000Z",
        updated_by="test",
    )
    item.update(fields)
    client.put_item(TableName=TABLE, Item=codec.encode_item(item))


def test_create_writes_the_record_and_registers_default(client: Any) -> None:
    physical_id, data = writer.apply(event(), client)
    assert physical_id == f"{TABLE}/version-record"
    record = read(client, keys.version_record())
    assert record is not None
    assert record["schema_version"] == schema.SCHEMA_VERSION
    assert record["aggregator_version"] == versioning.LIBRARY_VERSION
    assert record["aggregator_function"] == "zl-aggregator"
    assert record["aggregator_dlq_url"] == (
        "https://sqs.us-east-1.amazonaws.com/123456789012/zl-dlq"  # for `usage redrive`
    )
    assert record["client_min_version"] == "0.0.0"
    assert record["updated_by"] == f"cdk:{versioning.LIBRARY_VERSION}"
    assert (record["audit_retention_days"], record["usage_retention_days"]) == (90, 30)
    table_id = record["table_id"]  # the table's identity, drawn once (docs/errors.md)
    assert len(table_id) == 16
    writer.apply(event("Update", AuditRetentionDays="400"), client)
    assert (read(client, keys.version_record()) or {})["table_id"] == table_id  # never replaced
    by_name = read(client, keys.namespace_by_name("default"))
    assert by_name is not None and by_name["status"] == records.NAMESPACE_ACTIVE
    by_id = read(client, keys.namespace_by_id(by_name["id"]))
    assert by_id is not None and by_id["name"] == "default"
    assert data == {
        "SchemaVersion": schema.SCHEMA_VERSION,
        "AggregatorVersion": versioning.LIBRARY_VERSION,
        "ClientMinVersion": "0.0.0",
        "DefaultNamespaceId": by_name["id"],
    }


def test_update_is_idempotent_and_keeps_the_namespace_and_unknown_fields(client: Any) -> None:
    _, first = writer.apply(event(), client)
    set_record(client, client_min_version="0.15.0", features="kept")
    _, second = writer.apply(event("Update", AuditRetentionDays="400"), client)
    assert second["DefaultNamespaceId"] == first["DefaultNamespaceId"]
    record = read(client, keys.version_record())
    assert record is not None
    assert record["client_min_version"] == "0.15.0"  # kept, never reset
    assert record["features"] == "kept"  # attributes this code does not know survive
    assert record["audit_retention_days"] == 400
    registry = client.query(
        TableName=TABLE,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.NAMESPACE_NAMES_PK}},
    )
    assert registry["Count"] == 1


def test_refuses_an_aggregator_older_than_the_minimum_client(client: Any) -> None:
    set_record(client, client_min_version="0.19.0", aggregator_version="0.19.0")
    with pytest.raises(writer.DeploymentRefused, match=r"0\.18\.0 aggregator.*requires 0\.19\.0"):
        writer.apply(event("Update"), client)
    record = read(client, keys.version_record())
    assert record is not None and record["aggregator_version"] == "0.19.0"  # untouched

    writer.apply(event("Update", AllowAggregatorDowngrade="true"), client)
    record = read(client, keys.version_record())
    assert record is not None
    assert record["aggregator_version"] == versioning.LIBRARY_VERSION
    assert record["client_min_version"] == "0.19.0"  # an override never lowers the minimum


def test_rollback_after_a_refused_update_restores_the_previous_versions(client: Any) -> None:
    """CloudFormation rolls back by calling the (new) code again with the previous properties."""
    writer.apply(event(AggregatorVersion="0.19.0"), client)
    set_record(client, client_min_version="0.19.0", aggregator_version="0.19.0")
    with pytest.raises(writer.DeploymentRefused):
        writer.apply(event("Update", AggregatorVersion="0.18.0"), client)
    writer.apply(event("Update", AggregatorVersion="0.19.0"), client)
    record = read(client, keys.version_record())
    assert record is not None and record["aggregator_version"] == "0.19.0"


def test_schema_version_is_kept_or_refused_never_lowered(client: Any) -> None:
    set_record(client, schema_version="1.0.0")
    writer.apply(event("Update", SchemaVersion="1.2.0"), client)
    record = read(client, keys.version_record())
    assert record is not None and record["schema_version"] == "1.0.0"  # upgrade migrates, not cdk

    set_record(client, schema_version="1.3.0")
    with pytest.raises(writer.DeploymentRefused, match="newer"):
        writer.apply(event("Update", SchemaVersion="1.2.0"), client)
    writer.apply(event("Update", SchemaVersion="1.2.0", AllowAggregatorDowngrade="true"), client)
    record = read(client, keys.version_record())
    assert record is not None and record["schema_version"] == "1.3.0"

    set_record(client, schema_version="2.0.0")
    with pytest.raises(writer.DeploymentRefused, match="incompatible"):
        writer.apply(event("Update", AllowAggregatorDowngrade="true"), client)


def test_a_minimum_raised_while_writing_is_respected(client: Any) -> None:
    """A feature gate raising client_min_version between our read and write wins."""
    writer.apply(event(), client)

    class RacingClient:
        def __init__(self) -> None:
            self.raced = False

        def __getattr__(self, name: str) -> Any:
            return getattr(client, name)

        def update_item(self, **request: Any) -> Any:
            if not self.raced:
                self.raced = True
                client.update_item(
                    TableName=TABLE,
                    Key=codec.encode_item(keys.version_record()),
                    UpdateExpression="SET client_min_version = :v",
                    ExpressionAttributeValues={":v": {"S": "0.99.0"}},
                )
            return client.update_item(**request)

    racing = RacingClient()
    with pytest.raises(writer.DeploymentRefused, match=r"requires 0\.99\.0"):
        writer.apply(event("Update"), racing)
    assert racing.raced
    record = read(client, keys.version_record())
    assert record is not None and record["client_min_version"] == "0.99.0"


def test_delete_touches_nothing() -> None:
    class NoCalls:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"Delete must not call DynamoDB ({name})")

    physical_id, data = writer.apply(event("Delete"), NoCalls())
    assert (physical_id, data) == (f"{TABLE}/version-record", {})


# --- the CloudFormation response ------------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_PUT(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def response_url() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _Recorder.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/response", _Recorder.bodies
    finally:
        server.shutdown()
        server.server_close()


def test_handler_answers_success(
    client: Any,
    response_url: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, bodies = response_url
    monkeypatch.setattr(writer.boto3, "client", lambda *a, **k: client)
    handler.handler({**event(), "ResponseURL": url}, None)
    (body,) = bodies
    assert body["Status"] == "SUCCESS"
    assert body["PhysicalResourceId"] == f"{TABLE}/version-record"
    assert (body["StackId"], body["RequestId"], body["LogicalResourceId"]) == (
        event()["StackId"],
        "req-1",
        "VersionRecord",
    )
    assert body["Data"]["AggregatorVersion"] == versioning.LIBRARY_VERSION


def test_handler_answers_failed_with_the_reason(
    client: Any,
    response_url: tuple[str, list[dict[str, Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, bodies = response_url
    monkeypatch.setattr(writer.boto3, "client", lambda *a, **k: client)
    set_record(client, client_min_version="0.99.0")
    handler.handler({**event("Update"), "ResponseURL": url}, None)
    handler.handler({**event("Update", TableName="no-such-table"), "ResponseURL": url}, None)
    refused, broken = bodies
    assert refused["Status"] == "FAILED"
    assert (
        "requires 0.99.0" in refused["Reason"] and "allow_aggregator_downgrade" in refused["Reason"]
    )
    assert refused["PhysicalResourceId"] == f"{TABLE}/version-record"
    assert broken["Status"] == "FAILED"
    assert "ResourceNotFoundException" in broken["Reason"]


def test_handler_answers_failed_when_the_runtime_cannot_be_imported(
    response_url: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, bodies = response_url
    monkeypatch.setitem(sys.modules, "record_writer", None)  # `import record_writer` fails
    handler.handler({**event(), "ResponseURL": url}, None)
    (body,) = bodies
    assert body["Status"] == "FAILED"
    assert body["Reason"].startswith("cannot import the bundled zae_limiter package")
    assert body["PhysicalResourceId"] == "VersionRecord-failed"


class _NoTransactions:
    """A boto3 client that refuses what an MRSC table refuses (everything else goes through)."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def transact_write_items(self, **_: Any) -> Any:
        raise AssertionError("a transaction was sent to a multi-Region strongly consistent table")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_multi_region_table_is_written_without_a_transaction_and_says_so(client: Any) -> None:
    """docs/multi-region.md: the record names the Regions (for roles that may not describe the
    table), and `default` is registered one item at a time."""
    regions = "us-east-1,us-east-2,us-west-2"
    writer.apply(
        event(MultiRegionConsistency="STRONG", ReplicaRegions=regions), _NoTransactions(client)
    )
    record = read(client, keys.version_record())
    assert record is not None
    assert record["multi_region_consistency"] == "STRONG"
    assert record["replica_regions"] == regions.split(",")
    by_name = read(client, keys.namespace_by_name("default"))
    assert by_name is not None
    assert read(client, keys.namespace_by_id(by_name["id"])) is not None
    writer.apply(event("Update", MultiRegionConsistency="STRONG", ReplicaRegions=regions),
                 _NoTransactions(client))  # fmt: skip
    assert read(client, keys.namespace_by_name("default")) == by_name  # registered once
