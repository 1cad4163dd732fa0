"""Shared pytest fixtures (loaded by tests/conftest.py through `pytest_plugins`).

Engines
  ddb_endpoint   module: one DynamoDB Local JVM per test module on a free 127.0.0.1 port
                 (started by zae_limiter.local.start_engine; ENGINE_SCOPE says why). Set
                 ZAEL_TEST_ENDPOINT_URL to reuse an engine that is already running (e.g.
                 `zae-limiter local up`).
  ddb_local      module: the RunningEngine behind ddb_endpoint (None when reusing one).
  engine_pool    session: starts each module's engine while the module before it runs
                 (support/engine_pool.py).
  moto_endpoint  session: moto's ThreadedMotoServer in this process, for request-shape tests
                 only (it is not atomic under concurrency; see docs/contributing.md).
Clients (session loop, retries off so counts are exact; ddb_client per module, as its engine)
  ddb_client, moto_client
Tables (function scope, deleted afterwards)
  table_name     a unique name; creates nothing.
  table          `Repository.create_table` on DynamoDB Local -> TableRef(name, endpoint_url, region)
  raw_table      the schema module's bare table (no version record) on DynamoDB Local
  moto_table     the same bare table on moto
Helpers
  clock          FakeClock: clock() -> epoch ms; clock.advance(ms) / clock.set(ms)
  wire           the session's WireRecorder (attached to every DynamoDB client): `with wire.block()`
  no_backoff     standard-mode retries without sleeping (for fault-injection tests)
  iam_checked    every AWS request of the test is checked against the synthesized policy of the
                 role that sends it (support/iam_check.py); a denial fails the test.
                 ZAEL_TEST_IAM=1 applies it to every test
Guards (autouse)
  no_leftover_aggregators  a test that leaves a background aggregator running fails (and the
                 process is stopped, so it does not load the engine for the tests after it)
  (plugin)       support/leftover_tasks.py: a test that leaves a library task pending fails
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from support.clock import FakeClock
from support.engine_pool import EnginePool
from support.faults import zero_backoff
from support.leaks import leftover_aggregators
from support.tables import TableRef, create_raw_table, delete_table_quietly, unique_table_name
from support.wire import WireRecorder
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    RunningEngine,
)
from zae_limiter.local.processes import stop_pid

REGION = LOCAL_REGION
EXTERNAL_ENDPOINT_ENV = "ZAEL_TEST_ENDPOINT_URL"

#: Client settings for tests: fail fast, never retry (so requests on the wire are exact).
TEST_CLIENT_CONFIG = AioConfig(
    retries={"mode": "standard", "total_max_attempts": 1},
    connect_timeout=5,
    read_timeout=30,
    max_pool_connections=64,
)


def local_client_kwargs(endpoint_url: str) -> dict[str, Any]:
    """Keyword arguments for session.create_client("dynamodb", ...) against a local engine."""
    return {
        "endpoint_url": endpoint_url,
        "region_name": REGION,
        "aws_access_key_id": LOCAL_ACCESS_KEY_ID,
        "aws_secret_access_key": LOCAL_SECRET_ACCESS_KEY,
        "config": TEST_CLIENT_CONFIG,
    }


# --- engines ----------------------------------------------------------------------------------


#: One DynamoDB Local per test module, not per session: the engine slows down with everything
#: written to it (it keeps stream records for 24 hours, deleted tables' too, and its table
#: lookup behind every write queries them). Measured: after tests/behaviour/test_exactly_once.py on
#: one engine, a 100-item transaction took 2.4-2.9 s instead of 0.12-0.37 s; by 60% of the whole
#: suite its SQLite thread was 100% busy and such a transaction outlasted the 5 s read timeout.
ENGINE_SCOPE: Final = "module"


@pytest.fixture(scope="session")
def engine_pool() -> Iterator[EnginePool]:
    pool = EnginePool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope=ENGINE_SCOPE)
def ddb_local(engine_pool: EnginePool) -> Iterator[RunningEngine | None]:
    if os.environ.get(EXTERNAL_ENDPOINT_ENV):
        yield None
        return
    engine = engine_pool.take()
    try:
        yield engine
    finally:
        engine_pool.give_back(engine)


@pytest.fixture(scope=ENGINE_SCOPE)
def ddb_endpoint(ddb_local: RunningEngine | None) -> Iterator[str]:
    endpoint = ddb_local.endpoint_url if ddb_local else os.environ[EXTERNAL_ENDPOINT_ENV]
    # Anything that resolves the endpoint from the environment lands here, never on AWS.
    saved = os.environ.get("ZAEL_ENDPOINT_URL")
    os.environ["ZAEL_ENDPOINT_URL"] = endpoint
    try:
        yield endpoint
    finally:
        if saved is None:
            os.environ.pop("ZAEL_ENDPOINT_URL", None)
        else:
            os.environ["ZAEL_ENDPOINT_URL"] = saved


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


# --- clients ----------------------------------------------------------------------------------


@pytest.fixture(scope=ENGINE_SCOPE)
async def ddb_client(ddb_endpoint: str, wire: WireRecorder) -> AsyncIterator[Any]:
    async with get_session().create_client("dynamodb", **local_client_kwargs(ddb_endpoint)) as c:
        wire.attach(c)
        yield c


@pytest.fixture(scope="session")
async def moto_client(moto_endpoint: str, wire: WireRecorder) -> AsyncIterator[Any]:
    async with get_session().create_client("dynamodb", **local_client_kwargs(moto_endpoint)) as c:
        wire.attach(c)
        yield c


# --- tables -----------------------------------------------------------------------------------


@pytest.fixture
def table_name() -> str:
    return unique_table_name()


@pytest.fixture
async def table(ddb_endpoint: str, ddb_client: Any, table_name: str) -> AsyncIterator[TableRef]:
    """A fresh table made by `Repository.create_table` (version record, `default` namespace)."""
    from zae_limiter.repository import Repository

    await Repository.create_table(table=table_name, endpoint_url=ddb_endpoint, region=REGION)
    try:
        yield TableRef(table_name, ddb_endpoint, REGION)
    finally:
        await delete_table_quietly(ddb_client, table_name)


@pytest.fixture
async def raw_table(ddb_endpoint: str, ddb_client: Any, table_name: str) -> AsyncIterator[TableRef]:
    """The schema module's table with no records in it, on DynamoDB Local."""
    await create_raw_table(ddb_client, table_name)
    try:
        yield TableRef(table_name, ddb_endpoint, REGION)
    finally:
        await delete_table_quietly(ddb_client, table_name)


@pytest.fixture
async def moto_table(
    moto_endpoint: str, moto_client: Any, table_name: str
) -> AsyncIterator[TableRef]:
    """The schema module's table with no records in it, on moto (shape tests only)."""
    await create_raw_table(moto_client, table_name)
    try:
        yield TableRef(table_name, moto_endpoint, REGION)
    finally:
        await delete_table_quietly(moto_client, table_name)


# --- helpers ----------------------------------------------------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(scope="session", autouse=True)
def wire() -> Iterator[WireRecorder]:
    """One recorder for the session, attached to every DynamoDB client created in it.

    It records only inside `with wire.block() as w:` (or `async with`).
    """
    recorder = WireRecorder()
    recorder.install()
    try:
        yield recorder
    finally:
        recorder.uninstall()


@pytest.fixture(scope="session")
def iam_deployment() -> Any:
    """The deployment `iam_checked` resolves policies and requests to (a module may override it
    with another, say a multi-Region one, together with `iam_policies`)."""
    from support.iam_eval import Deployment

    return Deployment()


@pytest.fixture(scope="session")
def iam_policies(iam_deployment: Any) -> dict[str, list[dict[str, Any]]]:
    """Each role's statements as the construct synthesizes them (one synth per session)."""
    from support.iam_check import synthesize_policies

    return synthesize_policies(iam_deployment)


@pytest.fixture(scope="module")
def iam_role_check(
    iam_policies: dict[str, list[dict[str, Any]]], iam_deployment: Any
) -> Iterator[Any]:
    """The role check installed for one module (entry points wrapped, clients hooked)."""
    from support.iam_check import RoleCheck

    check = RoleCheck(iam_policies, iam_deployment)
    check.install()
    try:
        yield check
    finally:
        check.uninstall()


@pytest.fixture
def iam_checked(iam_role_check: Any) -> Iterator[Any]:
    """Fails the test if a role's policy refuses any request it made (support/iam_check.py)."""
    with iam_role_check.test() as checked:
        yield checked
    denials = sorted(Counter(checked.denials).items())
    assert not denials, "requests the deployed roles may not send:\n" + "\n".join(
        f"  {count} x {denial}" for denial, count in denials
    )


@pytest.fixture(autouse=True)
def _iam_everywhere(request: pytest.FixtureRequest) -> None:
    """`ZAEL_TEST_IAM=1`: the role check of `iam_checked` on every test, not only the suites that
    use it (a longer run, to look for requests a role may not send anywhere)."""
    if os.environ.get("ZAEL_TEST_IAM") == "1" and "iam_checked" not in request.fixturenames:
        request.getfixturevalue("iam_checked")


@pytest.fixture(autouse=True)
def no_leftover_aggregators() -> Iterator[None]:
    before = set(leftover_aggregators())
    yield
    left = {pid: cmd for pid, cmd in leftover_aggregators().items() if pid not in before}
    for pid in left:
        stop_pid(pid)
    assert not left, f"the test left background aggregators running: {left}"


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard-mode retries without their sleeps."""
    import botocore.retries.standard

    monkeypatch.setattr(
        botocore.retries.standard.ExponentialBackoff, "delay_amount", zero_backoff()
    )
