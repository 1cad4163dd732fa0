"""Failures below the library, on DynamoDB Local and loopback servers the tests start.

Every kind of failure comes out as `RateLimiterUnavailable` from `open()`, and from `acquire()`
under BLOCK; under ALLOW `acquire()` yields the degraded lease; nothing is left debited. A proxy
that closes every connection after answering (without saying so) costs nothing but connections.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig

from support.faultproxy import fault_proxy
from support.loopback import closing_proxy, ok, scripted, self_signed, server_tls
from support.tables import unique_table_name
from zae_limiter import (
    InfrastructureNotFoundError,
    Limit,
    OnUnavailable,
    RateLimiter,
    RateLimiterUnavailable,
    Repository,
    RequestEvent,
    ZAELimiterError,
)
from zae_limiter.dynamo import transport as transport_module
from zae_limiter.dynamo.transport import Transport
from zae_limiter.local.engine import free_port

FAST = AioConfig(connect_timeout=1, read_timeout=0.5)
PATIENT = AioConfig(connect_timeout=5, read_timeout=15)  # the most open() accepts


@pytest.fixture(autouse=True)
def no_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport_module, "backoff_scale", 0.0)


@pytest.fixture(params=["http", "aiohttp", "botocore"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ZAEL_TRANSPORT", request.param)
    return str(request.param)


async def test_a_proxy_that_closes_after_every_answer_costs_no_errors(
    table: Any, clock: Any, path: str
) -> None:
    events: list[RequestEvent] = []
    async with closing_proxy(table.endpoint_url) as proxy:
        repo = await Repository.open(
            table=table.name,
            endpoint_url=proxy.url,
            region=table.region,
            clock=clock,
            on_request=events.append,
            client_config=PATIENT,  # a loaded machine must not turn into lost answers here
            acquire_timeout=None,
        )
        try:
            limiter = RateLimiter(repo)
            await limiter.set_resource_defaults("api", [Limit.per_day("calls", 1_000)])
            for _ in range(200):
                async with limiter.acquire("u1", "api", {"calls": 2}) as lease:
                    await lease.adjust(calls=-1)  # an exit write on every call
            left = await limiter.check_availability("u1", "api")
        finally:
            await repo.close()
    outcomes = {e.outcome for e in events}
    assert left.available["calls"] == 1_000 - 200
    answered = [e for e in events if e.outcome == "ok"]
    assert proxy.connections == len(answered)  # every request came on a new connection
    if path in ("http", "aiohttp"):  # the close is seen before a connection is reused
        assert outcomes == {"ok"} and {e.attempt for e in events} == {1}
    else:  # aiobotocore writes on the closed connection, is refused before sending, retries
        assert outcomes == {"ok", "not_sent"}


# --- each kind of failure ---------------------------------------------------------------------

Endpoint = Callable[[Path, pytest.MonkeyPatch], contextlib.AbstractAsyncContextManager[str]]


@contextlib.asynccontextmanager
async def refused(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    yield f"http://127.0.0.1:{free_port()}"


@contextlib.asynccontextmanager
async def unresolvable(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    yield "http://dynamodb.zae-limiter-test.invalid:8000"


async def never_answer(body: bytes, writer: asyncio.StreamWriter) -> None:
    await asyncio.sleep(3)


async def drop_mid_answer(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(b'{"Item": {}}' * 10)[:-20])
    await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def read_timeout(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    async with scripted(never_answer) as server:
        yield server.url


@contextlib.asynccontextmanager
async def dropped(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    async with scripted(drop_mid_answer) as server:
        yield server.url


@contextlib.asynccontextmanager
async def plain_http_on_https(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)  # a TLS ClientHello: answered as an HTTP server would
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(plain, "127.0.0.1", 0)
    try:
        yield f"https://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
    finally:
        listener.close()


@contextlib.asynccontextmanager
async def untrusted_certificate(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    cert, key = self_signed(tmp)
    async with scripted(drop_mid_answer, tls=server_tls(cert, key)) as server:
        yield f"https://localhost:{server.port}"


@contextlib.asynccontextmanager
async def proxy_refused(tmp: Path, env: pytest.MonkeyPatch) -> AsyncIterator[str]:
    env.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    env.delenv("NO_PROXY", raising=False)
    env.delenv("no_proxy", raising=False)
    yield "http://dynamodb.zae-limiter-test.invalid:8000"


FAILURES: dict[str, tuple[Endpoint, str]] = {
    "connection refused": (refused, "could not be reached"),
    "DNS failure": (unresolvable, "could not be reached"),
    "TLS handshake failure": (plain_http_on_https, "TLS handshake"),
    "TLS verification failure": (untrusted_certificate, "TLS handshake"),
    "proxy refused": (proxy_refused, "proxy refused"),
    "read timeout": (read_timeout, "did not answer|outcome unknown"),
    "mid-answer drop": (dropped, "did not answer|outcome unknown"),
}


@pytest.fixture(params=list(FAILURES))
def failure(request: pytest.FixtureRequest) -> tuple[Endpoint, str]:
    return FAILURES[request.param]


async def test_open_raises_rate_limiter_unavailable(
    table: Any, failure: tuple[Endpoint, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, message = failure
    async with endpoint(tmp_path, monkeypatch) as url:
        with pytest.raises(RateLimiterUnavailable, match=message) as caught:
            await Repository.open(
                table=table.name, endpoint_url=url, region=table.region, client_config=FAST
            )
    assert isinstance(caught.value, ZAELimiterError)
    assert f"Cannot open table {table.name!r}" in str(caught.value)


@contextlib.asynccontextmanager
async def failing(repo: Repository, url: str) -> AsyncIterator[None]:
    """Every request of `repo` goes to `url` until the block ends."""
    broken = await Transport.connect(region=repo.region, endpoint_url=url, client_config=FAST)
    store = repo._store
    working, store.transport = store.transport, broken
    try:
        yield
    finally:
        store.transport = working
        await broken.close()


async def balance(limiter: RateLimiter) -> int:
    return (await limiter.check_availability("u1", "api")).available["calls"]


@pytest.mark.parametrize("mode", [OnUnavailable.BLOCK, OnUnavailable.ALLOW])
async def test_acquire_blocks_or_degrades_and_debits_nothing(
    limiter: RateLimiter,
    failure: tuple[Endpoint, str],
    mode: OnUnavailable,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint, message = failure
    await limiter.set_resource_defaults("api", [Limit.per_day("calls", 100)])
    async with limiter.acquire("u1", "api", {"calls": 1}):
        pass
    before = await balance(limiter)
    async with endpoint(tmp_path, monkeypatch) as url, failing(limiter.repository, url):
        if mode is OnUnavailable.BLOCK:
            with pytest.raises(RateLimiterUnavailable, match=message):
                async with limiter.acquire(
                    "u1", "api", {"calls": 5}, on_unavailable=mode, timeout=None
                ):
                    pass
        else:
            async with limiter.acquire(
                "u1", "api", {"calls": 5}, on_unavailable=mode, timeout=None
            ) as lease:
                assert lease.degraded
    assert await balance(limiter) == before


# --- credentials ------------------------------------------------------------------------------

NO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": None,
    "AWS_SECRET_ACCESS_KEY": None,
    "AWS_SESSION_TOKEN": None,
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/config",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI": None,
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": None,
    "AWS_PROFILE": None,
}


def without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in NO_CREDENTIALS.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(transport_module, "_shared_session", None)


async def test_missing_credentials_name_the_fix(
    table: Any, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    without_credentials(monkeypatch)
    with pytest.raises(RateLimiterUnavailable) as caught:
        await Repository.open(table=table.name, endpoint_url=table.endpoint_url)
    text = str(caught.value)
    assert "no AWS credentials were found" in text
    assert "AWS_ACCESS_KEY_ID" in text and 'eval "$(zae-limiter local env)"' in text


def test_the_cli_without_credentials_exits_1_with_the_fix(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from zae_limiter.cli import cli

    without_credentials(monkeypatch)
    result = CliRunner().invoke(
        cli,
        ["entity", "show", "u1", "--table", table.name, "--endpoint-url", table.endpoint_url],
    )
    assert result.exit_code == 1, result.output
    assert "no AWS credentials were found" in result.stderr
    assert 'eval "$(zae-limiter local env)"' in result.stderr
    assert "Traceback" not in result.output + result.stderr


async def test_delete_table_whose_answer_was_lost_still_succeeds(ddb_endpoint: str) -> None:
    """The first DeleteTable applies but its answer is lost; the retry finds the table gone."""

    table = unique_table_name()
    await Repository.create_table(table=table, endpoint_url=ddb_endpoint)
    async with fault_proxy(
        ddb_endpoint, seed=1, rate=1.0, kinds=("lost",), operations=("DeleteTable",), max_faults=1
    ) as proxy:
        await Repository.delete_table(table=table, endpoint_url=proxy.url)
        assert proxy.counts["lost"] == 1
    with pytest.raises(InfrastructureNotFoundError):
        await Repository.open(table=table, endpoint_url=ddb_endpoint)


async def test_reads_and_writes_on_a_table_gone_raise_only_public_errors(ddb_endpoint: str) -> None:
    """Nothing but ZAELimiterError escapes the public API: reads too (a deleted table)."""
    table = unique_table_name()
    await Repository.create_table(table=table, endpoint_url=ddb_endpoint)
    repo = await Repository.open(table=table, endpoint_url=ddb_endpoint)
    limiter = RateLimiter(repo)
    try:
        await repo.create_entity("gone-1")
        await Repository.delete_table(table=table, endpoint_url=ddb_endpoint)
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "get_limits": lambda: repo.get_limits("gone-1", "search"),
            "get_entity": lambda: repo.get_entity("gone-1"),
            "get_buckets": lambda: repo.get_buckets("gone-1"),
            "top_up": lambda: repo.top_up("gone-1", "search", {"rpm": 1}),
            "custom": lambda: repo.list_entities_with_custom_limits("search"),
            "usage": lambda: limiter.get_usage_summary(entity_id="gone-1", resource="search"),
            "defaults": lambda: limiter.set_resource_defaults(
                "search", [Limit.per_minute("rpm", 10)]
            ),
            # config read through the acquire path's config-read port (lowered there)
            "resolve": lambda: repo.resolve_limits("gone-1", "search"),
            "available": lambda: repo.check_availability("gone-1", "search"),
        }
        escaped: dict[str, str] = {}
        for name, call in calls.items():
            try:
                await call()
            except ZAELimiterError:
                continue
            except Exception as exc:
                escaped[name] = type(exc).__name__
        assert escaped == {}
        with pytest.raises(InfrastructureNotFoundError, match=table):
            await repo.get_entity("gone-1")
        with pytest.raises(InfrastructureNotFoundError, match=table):
            await repo.resolve_limits("gone-1", "search")
    finally:
        await repo.close()
