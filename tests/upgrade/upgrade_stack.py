"""Helpers of the upgrade tests: the moto stack handle, a direct version-record write, a way to
run a built zip the way Lambda would (tests/infra/lambda_sim.py)."""

from __future__ import annotations

import importlib.util
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from click.testing import CliRunner, Result

from support.fixtures import REGION
from support.tables import TableRef
from zae_limiter import Repository
from zae_limiter.cli import cli
from zae_limiter.dynamo import codec, records
from zae_limiter.schema import SCHEMA_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]
OLD_AGGREGATOR = "0.16.0"


def _load_lambda_sim() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "upgrade_lambda_sim", REPO_ROOT / "tests" / "infra" / "lambda_sim.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lambda_sim = _load_lambda_sim()


def old_code() -> bytes:
    """Some earlier aggregator code: any zip will do, moto never runs it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return {}\n")
    return buffer.getvalue()


@dataclass
class Stack:
    table: TableRef
    function: str
    functions: Any  # boto3 Lambda client on moto

    @property
    def endpoint(self) -> str:
        return self.table.endpoint_url

    def code_sha256(self) -> str:
        return str(
            self.functions.get_function_configuration(FunctionName=self.function)["CodeSha256"]
        )

    async def open(self) -> Repository:
        return await Repository.open(
            table=self.table.name, endpoint_url=self.endpoint, region=REGION, config_cache_ttl=0
        )

    async def record(self) -> dict[str, Any]:
        repo = await self.open()
        try:
            return await repo.get_version_record() or {}
        finally:
            await repo.close()

    def cli(self, *args: str, code: int = 0, input: str | None = None) -> Result:
        """`zae-limiter --table T --endpoint-url MOTO --region R ARGS...`, checking the exit."""
        result = CliRunner().invoke(
            cli,
            [
                "--table",
                self.table.name,
                "--endpoint-url",
                self.endpoint,
                "--region",
                REGION,
                *args,
            ],
            input=input,
        )
        assert result.exit_code == code, (
            f"exit {result.exit_code}\n--- stdout:\n{result.stdout}\n--- stderr:\n"
            f"{result.stderr}\n--- exception: {result.exception!r}"
        )
        return result


async def put_record(client: Any, table: str, **fields: Any) -> None:
    """Write the version record directly (as a deployment would), every field given."""
    values: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "aggregator_version": OLD_AGGREGATOR,
        "aggregator_function": None,
        "client_min_version": "0.0.0",
        "updated_at": "2026-01-05T10:00:00.000Z",
        "updated_by": f"cdk:{OLD_AGGREGATOR}",
    }
    values.update(fields)
    item = records.version_record_item(**values)
    await client.put_item(TableName=table, Item=codec.encode_item(item))
