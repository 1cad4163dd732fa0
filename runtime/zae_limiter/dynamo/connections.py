"""The lean path's HTTP/1.1 connections: keep-alive, one request at a time per connection.

Why our own: through one `aiohttp.ClientSession` a warm acquire costs about 0.45 ms more client
CPU (measured in one process, requests alternating between the two, docs/performance.md); the
session builds a request object, header multidicts, timers and a body-writer task per request,
none of which DynamoDB's small JSON POSTs need. This module does only what they need:

* a pool per endpoint, most recently used connection first, at most `limit` requests in flight;
* a connection whose peer closed it (EOF seen by the event loop), that is closing, or that was
  idle longer than `idle_limit_s`, is never reused; one that was handed a request it did not
  answer completely (timeout, cancellation, a damaged answer) is closed;
* answers framed by `Content-Length` or chunked encoding, or (without either) by the close;
  `Connection: close` is honoured; 1xx interim answers are skipped; 204 and 304 carry no body;
* connect and read timeouts (the read timeout restarts with every chunk of the answer);
* TLS through asyncio with the caller's `ssl.SSLContext`, and TCP keep-alive probes on request.

Failures come out as botocore's exceptions, which `dynamo.failures` maps once for every path: a
request found unsendable before any byte was written is `EndpointConnectionError` (certainly not
sent); a connection lost, or an answer that stopped or broke, after writing is
`ConnectionClosedError` or `ReadTimeoutError` (sent, outcome unknown).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from botocore import exceptions as bce

#: An answer's head (status line and headers) may not be longer than this.
MAX_HEAD_BYTES = 64 * 1024


@dataclass
class Answer:
    """One HTTP response, with the attribute names botocore's `after-call` handlers read:
    status code, headers (names lower-cased) and body."""

    status_code: int
    headers: dict[str, str]
    content: bytes


class BrokenAnswer(Exception):
    """The bytes that came back are not an HTTP/1.1 answer."""


class _Connection(asyncio.Protocol):
    """One connection; reads one answer at a time into `waiter`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, url: str, read_timeout: float) -> None:
        self.loop = loop
        self.url = url
        self.read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self.closed = False  # the peer closed it, or it was lost
        self.reusable = True  # False once an answer says `Connection: close`
        self.idle_since = 0.0
        self.waiter: asyncio.Future[Answer] | None = None
        self._buffer = bytearray()
        self._head: tuple[int, dict[str, str]] | None = None
        self._body_at = 0
        self._last_data = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self.waiter is None:
            self.reusable = False  # bytes nobody asked for: never reused
            return
        self._last_data = self.loop.time()
        try:
            answer = self._parse(eof=False)
        except BrokenAnswer as exc:
            self._fail(bce.ConnectionClosedError(endpoint_url=self.url, error=str(exc)))
            return
        if answer is not None:
            self._finish(answer)

    def eof_received(self) -> bool | None:
        self.closed = True
        if self.waiter is not None:
            try:
                answer = self._parse(eof=True)
            except BrokenAnswer as exc:
                answer = None
                reason = str(exc)
            else:
                reason = "the connection closed before the answer was complete"
            if answer is not None:
                self._finish(answer)
            else:
                self._fail(bce.ConnectionClosedError(endpoint_url=self.url, error=reason))
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None:
            reason = f"the connection was lost: {exc}" if exc else "the connection was closed"
            self._fail(bce.ConnectionClosedError(endpoint_url=self.url, error=reason))

    # --- one exchange -------------------------------------------------------------------------

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        """Write one request; the future gets its answer."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise bce.EndpointConnectionError(
                endpoint_url=self.url, error="the kept-alive connection was closed before writing"
            )
        self.waiter = waiter = self.loop.create_future()
        self._buffer.clear()
        self._head = None
        transport.write(data)
        self._last_data = self.loop.time()
        self._timer = self.loop.call_later(self.read_timeout, self._check_timeout)
        return waiter

    def _check_timeout(self) -> None:
        self._timer = None
        if self.waiter is None:
            return
        left = self._last_data + self.read_timeout - self.loop.time()
        if left > 0:
            self._timer = self.loop.call_later(left, self._check_timeout)
            return
        self._fail(
            bce.ReadTimeoutError(
                endpoint_url=self.url, error=f"no answer within {self.read_timeout:g} s"
            )
        )

    def _finish(self, answer: Answer) -> None:
        waiter, self.waiter = self.waiter, None
        self._stop_timer()
        if answer.headers.get("connection", "").lower() == "close" or self._buffer:
            self.reusable = False
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _fail(self, error: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        self._stop_timer()
        self.reusable = False
        self.abort()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # --- framing ------------------------------------------------------------------------------

    def _parse(self, *, eof: bool) -> Answer | None:
        """The answer, once the buffer holds all of it (None: not yet)."""
        buffer = self._buffer
        while self._head is None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise BrokenAnswer("the answer's head is too long")
                if eof and buffer:
                    raise BrokenAnswer("the connection closed inside the answer's head")
                return None
            status, headers = _head(bytes(buffer[:end]))
            if 100 <= status < 200:  # an interim answer: the real one follows
                del buffer[: end + 4]
                continue
            self._head = (status, headers)
            self._body_at = end + 4
        status, headers = self._head
        start = self._body_at
        if status in (204, 304):  # never a body
            del buffer[:start]
            return Answer(status, headers, b"")
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise BrokenAnswer(f"bad Content-Length {length!r}")
            end = start + int(length)
            if len(buffer) < end:
                if eof:
                    raise BrokenAnswer("the connection closed inside the answer's body")
                return None
            body = bytes(buffer[start:end])
            del buffer[:end]
            return Answer(status, headers, body)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self._chunked(status, headers, eof)
        if not eof:
            return None  # framed by the close
        self.reusable = False
        body = bytes(buffer[start:])
        buffer.clear()
        return Answer(status, headers, body)

    def _chunked(self, status: int, headers: dict[str, str], eof: bool) -> Answer | None:
        buffer = self._buffer
        at = self._body_at
        parts: list[bytes] = []
        while True:
            line_end = buffer.find(b"\r\n", at)
            if line_end < 0:
                break
            size_text = bytes(buffer[at:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise BrokenAnswer(f"bad chunk size {size_text!r}") from None
            if size == 0:
                trailer_end = buffer.find(b"\r\n\r\n", line_end)
                if trailer_end < 0 and buffer[line_end : line_end + 4] != b"\r\n\r\n":
                    break
                end = (trailer_end if trailer_end >= 0 else line_end) + 4
                del buffer[:end]
                return Answer(status, headers, b"".join(parts))
            data_end = line_end + 2 + size
            if len(buffer) < data_end + 2:
                break
            parts.append(bytes(buffer[line_end + 2 : data_end]))
            at = data_end + 2
        if eof:
            raise BrokenAnswer("the connection closed inside a chunked body")
        return None


def _head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BrokenAnswer(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise BrokenAnswer(f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class Connections:
    """Keep-alive connections to one endpoint (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        limit: int,
        idle_limit_s: float,
        tcp_keepalive: bool = False,
    ) -> None:
        parts = urlsplit(url)
        self.url = url
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.idle_limit_s = idle_limit_s
        self.tcp_keepalive = tcp_keepalive
        self._limit = max(1, limit)
        self._slots: asyncio.Semaphore | None = None  # made inside the running loop
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self.opened = 0  # connections made so far (a metric)

    async def post(self, data: bytes) -> Answer:
        """Send one whole request (head and body) and read its answer."""
        slots = self._slots
        if slots is None:
            slots = self._slots = asyncio.Semaphore(self._limit)
        async with slots:
            connection = self._reusable() or await self._connect()
            try:
                answer = await connection.send(data)
            except BaseException:
                self._discard(connection)  # never reused after an incomplete exchange
                raise
            if connection.closed or not connection.reusable:
                self._discard(connection)
            else:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            return answer

    def _reusable(self) -> _Connection | None:
        """The most recently used idle connection still open, closing the others it passes."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            if (
                connection.closed
                or not connection.reusable
                or connection.transport is None
                or connection.transport.is_closing()
                or time.monotonic() - connection.idle_since > self.idle_limit_s
            ):
                self._discard(connection)
                continue
            return connection
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        url, read_timeout = self.url, self.read_timeout
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop, url, read_timeout),
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.host if self.ssl_context is not None else None,
                ),
                self.connect_timeout,
            )
        except ssl.SSLError as exc:
            raise bce.SSLError(endpoint_url=self.url, error=exc) from exc
        except TimeoutError as exc:
            raise bce.ConnectTimeoutError(endpoint_url=self.url, error=exc) from exc
        except OSError as exc:  # refused, unreachable, DNS
            raise bce.EndpointConnectionError(endpoint_url=self.url, error=exc) from exc
        if self.tcp_keepalive:
            sock = connection.transport.get_extra_info("socket") if connection.transport else None
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self.opened += 1
        self._open.add(connection)
        return connection

    def _discard(self, connection: _Connection) -> None:
        connection.abort()
        self._open.discard(connection)

    async def close(self) -> None:
        """Close every connection."""
        for connection in list(self._open):
            self._discard(connection)
        self._idle.clear()


def request_bytes(path: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """One POST's bytes: request line, headers (with Content-Length) and body."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"POST {path} HTTP/1.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body
