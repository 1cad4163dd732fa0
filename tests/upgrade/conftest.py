"""Fixtures for the upgrade tests.

library      session: the `zae_limiter` package `upgrade` zips (the installed package, which holds
             the aggregator entry point `zae_limiter.lambdas.aggregator.handler`).
use_library  autouse: `upgrade` (function and command) builds its zip from `library`.
_iam         autouse: every request checked against its role's synthesized policy (`iam_checked`:
             `upgrade` is the admin's, so is its Lambda's code replacement).
stack        a moto "deployment": a table made by `Repository.create_table`, an aggregator
             function (any zip, handler `handler.handler`) and a version record naming it, at
             aggregator 0.16.0. moto stores functions and their code; it cannot invoke them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from importlib.resources.abc import Traversable
from typing import Any

import boto3
import pytest
from upgrade_stack import Stack, old_code, put_record

from support.fixtures import REGION
from support.tables import TableRef, delete_table_quietly
from zae_limiter import Repository
from zae_limiter.upgrade import bundle


@pytest.fixture(autouse=True)
def _iam(iam_checked: object) -> None:
    """Every request of these tests is one its role's synthesized policy allows."""


@pytest.fixture(scope="session")
def library() -> Traversable:
    return bundle.installed_package()


@pytest.fixture(autouse=True)
def use_library(library: Traversable, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "installed_package", lambda: library)


@pytest.fixture(scope="session")
def lambda_role(moto_endpoint: str) -> str:
    iam = boto3.client("iam", endpoint_url=moto_endpoint, region_name=REGION)
    role = iam.create_role(
        RoleName="zae-limiter-aggregator-test",
        AssumeRolePolicyDocument='{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", '
        '"Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}]}',
    )
    return str(role["Role"]["Arn"])


@pytest.fixture(scope="session")
def functions(moto_endpoint: str) -> Iterator[Any]:
    client = boto3.client("lambda", endpoint_url=moto_endpoint, region_name=REGION)
    yield client
    client.close()


@pytest.fixture
async def stack(
    moto_endpoint: str, moto_client: Any, table_name: str, lambda_role: str, functions: Any
) -> AsyncIterator[Stack]:
    await Repository.create_table(table=table_name, endpoint_url=moto_endpoint, region=REGION)
    function = f"{table_name}-aggregator"
    functions.create_function(
        FunctionName=function,
        Runtime="python3.12",
        Role=lambda_role,
        Handler=bundle.LAMBDA_HANDLER,
        Code={"ZipFile": old_code()},
    )
    await put_record(moto_client, table_name, aggregator_function=function)
    try:
        yield Stack(TableRef(table_name, moto_endpoint, REGION), function, functions)
    finally:
        functions.delete_function(FunctionName=function)
        await delete_table_quietly(moto_client, table_name)
