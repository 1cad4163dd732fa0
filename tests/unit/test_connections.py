"""The lean path's HTTP/1.1 connections, against a scripted server on 127.0.0.1.

Each test scripts how the server answers (framing, splitting, closing, hanging) and checks what
the pool returns or raises, and how many connections it opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from botocore import exceptions as bce

from zae_limiter.dynamo import connections
from zae_limiter.dynamo.connections import (
    Answer,
    ConnectFailed,
    ConnectionDropped,
    ConnectionPool,
    ReadTimedOut,
)
from zae_limiter.dynamo.http import _request_head
from zae_limiter.local.engine import free_port

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


def ok(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in ("HTTP/1.1 200 OK", *extra))
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@dataclass
class Server:
    """Reads one request at a time per connection and lets `reply` answer it."""

    reply: Reply
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    hangups: int = 0  # connections the client closed
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.requests.append(body)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                try:
                    await self.reply(body, writer)
                finally:
                    self.in_flight -= 1
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            self.hangups += 1
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def serving(reply: Reply) -> AsyncIterator[Server]:
    server = Server(reply)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


def pool_for(server: Server, **kwargs: float) -> ConnectionPool:
    settings = {"connect_timeout": 1.0, "read_timeout": 2.0, "size": 4, **kwargs}
    return ConnectionPool(
        f"http://127.0.0.1:{server.port}",
        connect_timeout=settings["connect_timeout"],
        read_timeout=settings["read_timeout"],
        size=int(settings["size"]),
    )


async def post(pool: ConnectionPool, body: bytes) -> Answer:
    head = _request_head({"host": f"{pool.host}:{pool.port}"}, len(body))
    return await pool.request(head, body)


async def echo(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(body))
    await writer.drain()


async def test_one_connection_carries_many_requests() -> None:
    async with serving(echo) as server:
        pool = pool_for(server)
        answers = [await post(pool, f"r{i}".encode()) for i in range(5)]
        await pool.close()
    assert [a.content for a in answers] == [f"r{i}".encode() for i in range(5)]
    assert {a.status_code for a in answers} == {200}
    assert server.connections == 1


async def test_an_answer_split_into_single_bytes_is_joined() -> None:
    async def trickle(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = b'{"Attributes":{}}'
        for byte in ok(payload, f"x-amz-crc32: {zlib.crc32(payload)}"):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0)

    async with serving(trickle) as server:
        pool = pool_for(server)
        answer = await post(pool, b"x")
        await pool.close()
    assert answer.content == b'{"Attributes":{}}'
    assert answer.headers["x-amz-crc32"] == str(zlib.crc32(answer.content))


async def test_a_chunked_answer_is_dechunked_and_the_connection_kept() -> None:
    async def chunked(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"abc", b"defgh"):
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")

    async with serving(chunked) as server:
        pool = pool_for(server)
        first, second = await post(pool, b"1"), await post(pool, b"2")
        await pool.close()
    assert first.content == second.content == b"abcdefgh"
    assert server.connections == 1


async def test_connection_close_answers_open_a_new_connection_each_time() -> None:
    async def closing(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(ok(body, "Connection: close"))
        await writer.drain()
        writer.close()

    async with serving(closing) as server:
        pool = pool_for(server)
        bodies = [(await post(pool, f"{i}".encode())).content for i in range(3)]
        await pool.close()
    assert bodies == [b"0", b"1", b"2"]
    assert server.connections == 3


async def test_an_answer_without_length_ends_with_the_connection() -> None:
    async def unframed(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.0 200 OK\r\n\r\n" + body * 3)
        await writer.drain()
        writer.close()

    async with serving(unframed) as server:
        pool = pool_for(server)
        answer = await post(pool, b"ab")
        await pool.close()
    assert answer.content == b"ababab"


async def test_interim_100_continue_is_skipped() -> None:
    async def interim(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(body))

    async with serving(interim) as server:
        pool = pool_for(server)
        answer = await post(pool, b"fine")
        await pool.close()
    assert (answer.status_code, answer.content) == (200, b"fine")


async def test_error_status_is_an_answer_not_a_failure() -> None:
    async def throttled(body: bytes, writer: asyncio.StreamWriter) -> None:
        payload = b'{"__type":"x#ThrottlingException","message":"slow down"}'
        writer.write(ok(payload).replace(b"200 OK", b"400 Bad Request"))

    async with serving(throttled) as server:
        pool = pool_for(server)
        answer = await post(pool, b"x")
        again = await post(pool, b"y")
        await pool.close()
    assert answer.status_code == again.status_code == 400
    assert server.connections == 1


async def test_no_answer_within_the_read_timeout() -> None:
    async def hang(body: bytes, writer: asyncio.StreamWriter) -> None:
        if body == b"hang":
            await asyncio.sleep(5)
        else:
            writer.write(ok(body))

    async with serving(hang) as server:
        pool = pool_for(server, read_timeout=0.2)
        with pytest.raises(ReadTimedOut, match=r"0\.2 s"):
            await post(pool, b"hang")
        after = await post(pool, b"next")  # the timed-out connection is not reused
        await pool.close()
    assert after.content == b"next"
    assert server.connections == 2


async def test_nothing_listening_is_a_connect_failure() -> None:
    pool = ConnectionPool(
        f"http://127.0.0.1:{free_port()}", connect_timeout=1.0, read_timeout=1.0, size=1
    )
    with pytest.raises(ConnectFailed, match="cannot connect"):
        await post(pool, b"x")


async def drop_mid_answer(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(b"0123456789")[:-4])  # head and part of the body
    await writer.drain()
    writer.close()


async def damaged(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(b'{"a":1}', f"x-amz-crc32: {zlib.crc32(b'{}')}"))


async def excess(body: bytes, writer: asyncio.StreamWriter) -> None:
    writer.write(ok(body) + b"HTTP/1.1 200 OK\r\n")


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (drop_mid_answer, "ended before the answer"),
        (damaged, "CRC32"),
        (excess, "more than"),
    ],
)
async def test_a_broken_answer_is_a_dropped_connection(reply: Reply, match: str) -> None:
    async with serving(reply) as server:
        pool = pool_for(server)
        with pytest.raises(ConnectionDropped, match=match):
            await post(pool, b"x")
        await pool.close()


async def test_the_pool_bounds_requests_in_flight() -> None:
    async def slow(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(ok(body))

    async with serving(slow) as server:
        pool = pool_for(server, size=2)
        answers = await asyncio.gather(*(post(pool, f"{i}".encode()) for i in range(6)))
        await pool.close()
    assert sorted(a.content for a in answers) == [f"{i}".encode() for i in range(6)]
    assert server.most_in_flight == 2
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    async def answer_then_close(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(ok(body))
        await writer.drain()
        writer.close()  # no Connection: close header: the client learns it from the socket

    async with serving(answer_then_close) as server:
        pool = pool_for(server)
        await post(pool, b"1")
        await asyncio.sleep(0.05)
        second = await post(pool, b"2")
        await pool.close()
    assert second.content == b"2"
    assert server.connections == 2


async def test_connections_idle_too_long_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connections, "IDLE_LIMIT_S", 0.0)
    async with serving(echo) as server:
        pool = pool_for(server)
        await post(pool, b"1")
        await asyncio.sleep(0.01)
        await post(pool, b"2")
        await pool.close()
    assert server.connections == 2


async def test_a_cancelled_request_does_not_leave_its_connection_in_the_pool() -> None:
    async def slow_once(body: bytes, writer: asyncio.StreamWriter) -> None:
        if body == b"slow":
            await asyncio.sleep(0.3)
        writer.write(ok(body))

    async with serving(slow_once) as server:
        pool = pool_for(server)
        task = asyncio.ensure_future(post(pool, b"slow"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        answer = await post(pool, b"after")  # must not read the slow answer
        await asyncio.sleep(0.4)
        hangups = server.hangups  # the cancelled request's connection was closed, not kept
        await pool.close()
    assert answer.content == b"after"
    assert server.connections == 2
    assert hangups == 1


async def test_a_closed_pool_refuses_requests() -> None:
    async with serving(echo) as server:
        pool = pool_for(server)
        await pool.close()
        with pytest.raises(ConnectFailed, match="closed"):
            await post(pool, b"x")


def test_only_http_urls_are_accepted() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        ConnectionPool("ftp://example.com", connect_timeout=1, read_timeout=1, size=1)


async def test_http_path_maps_a_read_timeout_to_botocore_and_a_write_to_unknown_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end through Transport: a write whose answer never comes has an unknown outcome."""
    from aiobotocore.config import AioConfig

    from zae_limiter.dynamo import transport as transport_module
    from zae_limiter.dynamo.transport import Transport, UnknownOutcome

    async def hang(body: bytes, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setattr(transport_module, "backoff_scale", 0.0)
    async with serving(hang) as server:
        transport = await Transport.connect(
            region="us-east-1",
            endpoint_url=f"http://127.0.0.1:{server.port}",
            client_config=AioConfig(read_timeout=0.2),
        )
        try:
            assert transport.http is not None
            request = {"TableName": "t", "Key": {"pk": {"S": "a"}}}
            with pytest.raises(UnknownOutcome) as caught:
                await transport.call("UpdateItem", request, write=True)
            assert isinstance(caught.value.__cause__, bce.ReadTimeoutError)
            assert len(server.requests) == 1  # an unknown outcome is never re-sent blindly
        finally:
            await transport.close()


async def test_proxied_endpoints_go_through_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    from zae_limiter.dynamo.transport import Transport

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    transport = await Transport.connect(
        region="us-east-1", endpoint_url="http://dynamodb.example.invalid:8000", client_config=None
    )
    try:
        assert transport.http is None
    finally:
        await transport.close()


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for `localhost` and its key, as PEM files (made with moto's `cryptography`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_endpoints_speak_tls_and_verify_the_certificate(tmp_path: Path) -> None:
    cert, key = self_signed_certificate(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server = Server(echo)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_context)
    url = f"https://localhost:{listener.sockets[0].getsockname()[1]}"
    try:
        trusting = ConnectionPool(
            url,
            connect_timeout=2,
            read_timeout=2,
            size=2,
            ssl_context=ssl.create_default_context(cafile=str(cert)),
        )
        bodies = [(await post(trusting, f"t{i}".encode())).content for i in range(3)]
        await trusting.close()
        assert bodies == [b"t0", b"t1", b"t2"]
        assert server.connections == 1  # TLS connections are kept alive too

        default = ConnectionPool(url, connect_timeout=2, read_timeout=2, size=1)
        with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
            await post(default, b"x")
    finally:
        listener.close()


async def test_https_clients_take_botocores_tls_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from zae_limiter.dynamo.transport import Transport

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    transport = await Transport.connect(
        region="eu-west-1", endpoint_url="https://dynamodb.eu-west-1.amazonaws.com",
        client_config=None,
    )
    try:
        assert transport.http is not None
        context = transport.http._pool._ssl
        assert context is not None
        assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
        assert (transport.http._pool.host, transport.http._pool.port) == (
            "dynamodb.eu-west-1.amazonaws.com", 443)
    finally:
        await transport.close()
