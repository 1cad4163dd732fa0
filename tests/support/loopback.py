"""Loopback servers for transport tests, on 127.0.0.1 only.

* `Scripted`: reads one HTTP request at a time per connection and lets a `reply` coroutine
  answer it (or not): hang, drop mid-answer, damage the body, close without saying so.
* `ClosingProxy`: forwards each request to an upstream (DynamoDB Local) and closes the client's
  connection right after writing the answer, without `Connection: close` (what some load
  balancers and proxies do).
* `self_signed(directory)`: a certificate for `localhost` and its key (PEM files).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

Reply = Callable[[bytes, asyncio.StreamWriter], Awaitable[None]]


def ok(body: bytes, *extra: str, status: str = "200 OK") -> bytes:
    """An HTTP/1.1 answer framed by Content-Length."""
    head = "".join(f"{line}\r\n" for line in (f"HTTP/1.1 {status}", *extra))
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request's head (up to the blank line) and body (Content-Length framed)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    return head, await reader.readexactly(length)


@dataclass
class Scripted:
    """Answers each request with `reply(body, writer)`; counts connections and requests."""

    reply: Reply
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while not writer.is_closing():
                _, body = await read_request(reader)
                self.requests.append(body)
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                try:
                    await self.reply(body, writer)
                finally:
                    self.in_flight -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def scripted(reply: Reply, tls: ssl.SSLContext | None = None) -> AsyncIterator[Scripted]:
    server = Scripted(reply)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()


@dataclass
class ClosingProxy:
    """Forwards to `upstream`; closes every client connection right after the answer."""

    upstream: str
    connections: int = 0
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head, body = await read_request(reader)
            answer = await self._forward(head, body)
            writer.write(answer)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()  # no `Connection: close` was sent: the client learns it from the socket

    async def _forward(self, head: bytes, body: bytes) -> bytes:
        parts = urlsplit(self.upstream)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        lines = [line for line in head.split(b"\r\n") if line]
        lines = [line for line in lines if not line.lower().startswith(b"connection:")]
        writer.write(b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n" + body)
        await writer.drain()
        answer = await reader.read()  # to EOF: the upstream closes after answering
        writer.close()
        answer_head, _, answer_body = answer.partition(b"\r\n\r\n")
        kept = [
            line
            for line in answer_head.split(b"\r\n")
            if not line.lower().startswith(b"connection:")
        ]
        return b"\r\n".join(kept) + b"\r\n\r\n" + answer_body

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def closing_proxy(upstream: str) -> AsyncIterator[ClosingProxy]:
    proxy = ClosingProxy(upstream)
    listener = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.port = listener.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        listener.close()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for `localhost` and its key, as PEM files (made with `cryptography`)."""
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


def server_tls(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context
