"""The lean path (`dynamo.http` over the library's connections, `dynamo.connections`) through
`Transport`, against scripted servers on 127.0.0.1: keep-alive, closes the server does not
announce, timeouts, damaged answers, framing, TLS; and the same path carried by aiohttp."""

from __future__ import annotations

import asyncio
import json
import ssl
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from botocore import exceptions as bce

from support.loopback import ok, scripted, self_signed, server_tls
from zae_limiter.dynamo import transport as transport_module
from zae_limiter.dynamo.transport import DynamoUnavailable, Transport, UnknownOutcome

REQUEST = {"TableName": "t", "Key": {"pk": {"S": "a"}}}


@pytest.fixture(autouse=True)
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("ZAEL_TRANSPORT", "http")
    monkeypatch.setattr(transport_module, "backoff_scale", 0.0)
    # a session of its own: the shared one caches the credentials it first resolves
    monkeypatch.setattr(transport_module, "_shared_session", None)


async def connect(url: str, **config: Any) -> Transport:
    transport = await Transport.connect(
        region="us-east-1", endpoint_url=url, client_config=AioConfig(**config) if config else None
    )
    assert transport.http is not None
    return transport


@pytest.fixture
async def opened() -> AsyncIterator[list[Transport]]:
    transports: list[Transport] = []
    yield transports
    for transport in transports:
        await transport.close()


def answer(body: bytes) -> bytes:
    """A JSON answer echoing the request body under "Echo", with DynamoDB's CRC32 header."""
    payload = json.dumps({"Echo": body.decode()}).encode()
    return ok(payload, f"x-amz-crc32: {zlib.crc32(payload)}")


async def echo(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(answer(body))
    await writer.drain()


async def test_one_connection_carries_many_requests(opened: list[Transport]) -> None:
    async with scripted(echo) as server:
        transport = await connect(server.url)
        opened.append(transport)
        answers = [await transport.call("GetItem", {**REQUEST, "n": i}) for i in range(5)]
    assert [json.loads(a["Echo"])["n"] for a in answers] == list(range(5))
    assert server.connections == 1


async def test_a_close_the_server_does_not_announce_is_seen_before_reuse(
    opened: list[Transport],
) -> None:
    """Back-to-back writes to a server that closes after each answer without saying so."""

    async def answer_then_close(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(body))
        await writer.drain()
        writer.close()

    async with scripted(answer_then_close) as server:
        transport = await connect(server.url)
        opened.append(transport)
        for i in range(20):
            await transport.call("UpdateItem", {**REQUEST, "n": i}, write=True)
    assert len(server.requests) == server.connections == 20


async def test_no_answer_within_the_read_timeout_is_an_unknown_outcome(
    opened: list[Transport],
) -> None:
    async def hang(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    async with scripted(hang) as server:
        transport = await connect(server.url, read_timeout=0.2)
        opened.append(transport)
        with pytest.raises(UnknownOutcome) as caught:
            await transport.call("UpdateItem", REQUEST, write=True)
        assert isinstance(caught.value.__cause__, bce.ReadTimeoutError)
        assert len(server.requests) == 1  # an unknown outcome is never re-sent blindly
        with pytest.raises(DynamoUnavailable, match="did not answer"):
            await transport.call("GetItem", REQUEST)  # a read is retried, then gives up
        assert len(server.requests) == 1 + transport_module.MAX_ATTEMPTS


async def drop_mid_answer(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(answer(body)[:-4])  # head and part of the body
    await writer.drain()
    writer.close()


async def damaged(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(b'{"a":1}', f"x-amz-crc32: {zlib.crc32(b'{}')}"))


async def assert_unknown_outcome(reply: Any, opened: list[Transport]) -> None:
    """One write to a server answering with `reply` ends in an unknown outcome, sent once."""
    async with scripted(reply) as server:
        transport = await connect(server.url)
        opened.append(transport)
        with pytest.raises(UnknownOutcome) as caught:
            await transport.call("UpdateItem", REQUEST, write=True)
    assert isinstance(caught.value.__cause__, bce.ConnectionClosedError)
    assert len(server.requests) == 1


@pytest.mark.parametrize("reply", [drop_mid_answer, damaged])
async def test_a_broken_answer_is_an_unknown_outcome(opened: list[Transport], reply: Any) -> None:
    await assert_unknown_outcome(reply, opened)


async def test_the_pool_bounds_requests_in_flight(opened: list[Transport]) -> None:
    async def slow(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(answer(body))

    async with scripted(slow) as server:
        transport = await connect(server.url, max_pool_connections=2)
        opened.append(transport)
        await asyncio.gather(*(transport.call("GetItem", REQUEST) for _ in range(6)))
    assert server.most_in_flight == 2
    assert server.connections == 2


async def test_an_error_status_is_an_answer_and_keeps_the_connection(
    opened: list[Transport],
) -> None:
    async def throttled(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = b'{"__type":"x#ThrottlingException","message":"slow down"}'
        writer.write(ok(payload, status="400 Bad Request"))

    async with scripted(throttled) as server:
        transport = await connect(server.url)
        opened.append(transport)
        with pytest.raises(DynamoUnavailable, match="kept throttling"):
            await transport.call("UpdateItem", REQUEST, write=True)
    assert len(server.requests) == transport_module.MAX_ATTEMPTS
    assert server.connections == 1


async def test_the_retry_budget_stops_retries_in_a_brown_out(opened: list[Transport]) -> None:
    async def throttled(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(ok(b'{"__type":"x#ThrottlingException"}', status="400 Bad Request"))

    async with scripted(throttled) as server:
        transport = await connect(server.url)
        opened.append(transport)
        transport.budget.available = 10  # two retries' worth left
        for _ in range(3):
            with pytest.raises(DynamoUnavailable):
                await transport.call("GetItem", REQUEST)
    assert len(server.requests) == 3 + 2  # three first sends, two retries
    assert transport.budget.available == 0


async def test_https_speaks_tls_with_the_configured_ca_bundle(
    opened: list[Transport], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed(tmp_path)
    async with scripted(echo, tls=server_tls(cert, key)) as server:
        url = f"https://localhost:{server.port}"
        untrusting = await connect(url)
        opened.append(untrusting)
        with pytest.raises(DynamoUnavailable, match="TLS handshake") as caught:
            await untrusting.call("GetItem", REQUEST)
        assert isinstance(caught.value.cause, bce.SSLError)
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        monkeypatch.setattr(transport_module, "_shared_session", None)
        trusting = await connect(url)
        opened.append(trusting)
        for _ in range(3):
            await trusting.call("GetItem", REQUEST)
    assert server.connections == 1  # one kept-alive connection (the refused one never got here)
    assert len(server.requests) == 3


async def test_https_clients_verify_certificates_by_default(opened: list[Transport]) -> None:
    transport = await connect("https://dynamodb.eu-west-1.amazonaws.com")
    opened.append(transport)
    assert transport.http is not None and transport.http.ssl_context is not None
    context = transport.http.ssl_context
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)


async def test_proxied_endpoints_go_through_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    transport = await Transport.connect(
        region="us-east-1", endpoint_url="http://dynamodb.example.invalid:8000"
    )
    try:
        assert transport.http is None
    finally:
        await transport.close()


def echoed(answer: dict[str, Any]) -> int:
    return int(json.loads(answer["Echo"])["n"])


async def echoes_over(reply: Any, opened: list[Transport], n: int = 3) -> tuple[list[int], int]:
    """`n` GetItems to a server answering with `reply`: what each echoed, and connections."""
    async with scripted(reply) as server:
        transport = await connect(server.url)
        opened.append(transport)
        answers = [await transport.call("GetItem", {**REQUEST, "n": i}) for i in range(n)]
    return [echoed(a) for a in answers], server.connections


async def test_a_chunked_answer_is_read_whole_and_keeps_the_connection(
    opened: list[Transport],
) -> None:
    async def chunked(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = json.dumps({"Echo": body.decode()}).encode()
        half = len(payload) // 2
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:half], payload[half:])
        )
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # an interim answer first
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await writer.drain()
        writer.write(chunks + b"0\r\n\r\n")

    assert await echoes_over(chunked, opened, 3) == ([0, 1, 2], 1)


async def test_an_answer_saying_connection_close_is_not_reused(opened: list[Transport]) -> None:
    async def closing(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = json.dumps({"Echo": body.decode()}).encode()
        writer.write(ok(payload, "Connection: close"))  # and keeps the socket open

    assert await echoes_over(closing, opened, 3) == ([0, 1, 2], 3)


async def test_an_answer_framed_by_the_close_is_read_to_the_end(opened: list[Transport]) -> None:
    async def unframed(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = json.dumps({"Echo": body.decode()}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n" + payload)
        await writer.drain()
        writer.close()

    assert await echoes_over(unframed, opened, 2) == ([0, 1], 2)


async def test_aiohttp_can_carry_the_lean_path(
    opened: list[Transport], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZAEL_TRANSPORT", "aiohttp")
    assert await echoes_over(echo, opened) == ([0, 1, 2], 1)
    http = opened[-1].http
    assert http is not None and http.connections is None


async def test_bytes_after_an_answer_retire_its_connection(opened: list[Transport]) -> None:
    async def chatty(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer(body) + b"HTTP/1.1 200 OK\r\n")  # more than was asked for

    assert await echoes_over(chatty, opened) == ([0, 1, 2], 3)


async def test_a_204_answer_has_no_body_and_keeps_its_connection(opened: list[Transport]) -> None:
    async def no_content(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")

    async with scripted(no_content) as server:
        transport = await connect(server.url, read_timeout=1)
        opened.append(transport)
        for _ in range(2):
            assert "Echo" not in await transport.call("GetItem", REQUEST)
    assert server.connections == 1


@pytest.mark.parametrize("carrier", ["http", "aiohttp"])
@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: 9\r\nTransfer-Encoding: chunked", b"Content-Length: 5\r\nContent-Length: 9"],
    ids=["length and chunked", "two lengths"],
)
async def test_conflicting_framing_is_an_unknown_outcome_never_an_answer(
    opened: list[Transport], monkeypatch: pytest.MonkeyPatch, carrier: str, framing: bytes
) -> None:
    async def conflicting(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n" + framing + b"\r\n\r\n5\r\n{}{}{\r\n0\r\n\r\n")

    monkeypatch.setenv("ZAEL_TRANSPORT", carrier)
    await assert_unknown_outcome(conflicting, opened)
