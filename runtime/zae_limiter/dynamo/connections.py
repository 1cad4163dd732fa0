"""HTTP/1.1 keep-alive connections for the lean request path, on asyncio protocols.

DynamoDB's JSON protocol needs very little of HTTP: one POST to `/`, an answer framed by
Content-Length (chunked is understood too), connections kept alive. A general client (aiohttp)
spends about 0.6 ms of CPU per request on this machine on things this use never needs; here a
request is one `transport.write` and the answer is parsed once, when it is complete.

Errors say how far a request got, because that decides whether a write may have applied:
`ConnectFailed` / `ConnectTimedOut` (nothing was sent), `ReadTimedOut` and `ConnectionDropped`
(sent, answer unknown).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit

#: Idle connections older than this are closed rather than reused (servers drop idle ones).
IDLE_LIMIT_S = 30.0
_HEAD_END = b"\r\n\r\n"


class HttpFailure(Exception):
    """A request that got no complete answer."""


class ConnectFailed(HttpFailure):
    """No connection could be opened (nothing was sent)."""


class ConnectTimedOut(ConnectFailed):
    """Opening a connection took longer than the connect timeout (nothing was sent)."""


class ReadTimedOut(HttpFailure):
    """The request was sent; no complete answer came within the read timeout."""


class ConnectionDropped(HttpFailure):
    """The request was sent; the connection ended or the answer was malformed."""


@dataclass
class Answer:
    """One HTTP response, with the attribute names botocore's `after-call` handlers read:
    status code, headers (names lower-cased) and body."""

    status_code: int
    headers: dict[str, str]
    content: bytes


class _Head(NamedTuple):
    """An answer's status line and headers, parsed."""

    status: int
    headers: dict[str, str]  # names lower-cased
    body_start: int
    keep_alive: bool


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._buffer = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head: _Head | None = None

    # --- asyncio.Protocol -----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._waiter is None:  # bytes nobody asked for: the connection is out of step
            self.close()
            return
        try:
            answer = self._complete_answer()
        except ConnectionDropped as exc:
            self._fail(exc)
            return
        if answer is not None:
            self._finish(answer)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._waiter is not None and not self._waiter.done():
            head = self._head
            if head is not None and _framed_by_close(head.headers):
                self._finish(
                    Answer(head.status, head.headers, bytes(self._buffer[head.body_start :]))
                )
                return
            self._fail(ConnectionDropped(f"the connection ended before the answer did ({exc})"))

    # --- requests ---------------------------------------------------------------------------
    def send(self, payload: bytes, read_timeout: float) -> asyncio.Future[Answer]:
        """Write one request; the future completes with its answer."""
        assert self.transport is not None and self._waiter is None
        self._buffer.clear()
        self._head = None
        waiter: asyncio.Future[Answer] = self._loop.create_future()
        self._waiter = waiter
        self._timer = self._loop.call_later(read_timeout, self._time_out, read_timeout)
        self.transport.write(payload)
        return waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _time_out(self, seconds: float) -> None:
        self._timer = None
        self._fail(ReadTimedOut(f"no complete answer within {seconds:g} s"))

    def _finish(self, answer: Answer) -> None:
        waiter = self._settle()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, exc: HttpFailure) -> None:
        waiter = self._settle()
        self.close()  # a half-read answer leaves the connection unusable
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _settle(self) -> asyncio.Future[Answer] | None:
        waiter, self._waiter = self._waiter, None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return waiter

    # --- parsing ----------------------------------------------------------------------------
    def _complete_answer(self) -> Answer | None:
        """The answer, once the buffer holds all of it; None while more is to come."""
        buffer = self._buffer
        if self._head is None:
            end = buffer.find(_HEAD_END)
            if end < 0:
                return None
            self._head = _parse_head(bytes(buffer[:end]), end + len(_HEAD_END))
            if self._head.status < 200:  # an interim answer (100 Continue): the real one follows
                del buffer[: self._head.body_start]
                self._head = None
                return self._complete_answer()
        status, headers, start, keep_alive = self._head
        length = headers.get("content-length")
        if status in (204, 304):
            body = b""
        elif length is not None:
            end = start + _content_length(length)
            if len(buffer) < end:
                return None
            if len(buffer) > end:
                raise ConnectionDropped("the server sent more than the answer's Content-Length")
            body = bytes(buffer[start:end])
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            dechunked = _dechunk(buffer, start)
            if dechunked is None:
                return None
            body = dechunked
        else:
            return None  # _framed_by_close: connection_lost completes it
        _check_crc32(headers, body)
        if not keep_alive:
            self.close()
        return Answer(status, headers, body)


def _parse_head(head: bytes, start: int) -> _Head:
    """The status line and headers of an answer whose body starts at `start`."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise ConnectionDropped(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise ConnectionDropped(f"malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
    return _Head(int(code), headers, start, keep_alive)


def _framed_by_close(headers: Mapping[str, str]) -> bool:
    """An answer with neither Content-Length nor chunking ends where the connection does."""
    return (
        "content-length" not in headers
        and "chunked" not in headers.get("transfer-encoding", "").lower()
    )


def _content_length(value: str) -> int:
    if not value.isdigit():
        raise ConnectionDropped(f"bad Content-Length {value[:40]!r}")
    return int(value)


def _dechunk(buffer: bytearray, start: int) -> bytes | None:
    """The body of a complete chunked answer, or None while chunks are still arriving."""
    body = bytearray()
    at = start
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size_text = bytes(buffer[at:line_end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ConnectionDropped(f"bad chunk size {size_text[:20]!r}") from None
        at = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", at)
            while trailer_end > at:  # skip trailer fields up to the empty line
                at = trailer_end + 2
                trailer_end = buffer.find(b"\r\n", at)
            if trailer_end < 0:
                return None
            if trailer_end + 2 != len(buffer):
                raise ConnectionDropped("the server sent more than the chunked answer")
            return bytes(body)
        if len(buffer) < at + size + 2:
            return None
        body += buffer[at : at + size]
        at += size + 2


def _check_crc32(headers: Mapping[str, str], body: bytes) -> None:
    """DynamoDB sends x-amz-crc32 of the body; a mismatch means the answer was damaged."""
    expected = headers.get("x-amz-crc32")
    if expected is not None and expected.isdigit() and int(expected) != zlib.crc32(body):
        raise ConnectionDropped(f"the answer failed its CRC32 check (x-amz-crc32 {expected})")


class ConnectionPool:
    """Keep-alive connections to one endpoint, at most `size` requests in flight."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float,
        read_timeout: float,
        size: int,
        ssl_context: ssl.SSLContext | None = None,
        tcp_keepalive: bool = False,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http:// or https:// URL, not {url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._ssl = ssl_context or ssl.create_default_context()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._tcp_keepalive = tcp_keepalive
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Connection] = []
        self._closed = False

    async def request(self, head: bytes, body: bytes) -> Answer:
        """Send `head` (request line and headers, ending in a blank line) and `body`."""
        if self._closed:
            raise ConnectFailed("the connection pool is closed")
        async with self._slots:
            connection = self._reusable() or await self._open()
            try:
                answer = await connection.send(head + body, self.read_timeout)
            except BaseException:  # failed or cancelled: its answer may still be on the way
                connection.close()
                raise
            if connection.closed or self._closed:
                connection.close()
            else:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            return answer

    def _reusable(self) -> _Connection | None:
        idle = self._idle
        oldest_allowed = time.monotonic() - IDLE_LIMIT_S
        while idle:
            connection = idle.pop()  # the most recently used is the least likely to be dropped
            if (
                not connection.closed
                and connection.idle_since >= oldest_allowed
                and connection.transport is not None
                and not connection.transport.is_closing()
            ):
                return connection
            connection.close()
        return None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: _Connection(loop),
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise ConnectTimedOut(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        if self._tcp_keepalive and connection.transport is not None:
            sock = connection.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return connection

    async def close(self) -> None:
        """Close idle connections now; busy ones close when their answer arrives."""
        self._closed = True
        while self._idle:
            self._idle.pop().close()
