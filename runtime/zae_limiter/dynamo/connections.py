"""The lean path's HTTP/1.1 connections: keep-alive, one request at a time per connection.

Why our own pool: through one `aiohttp.ClientSession` a warm acquire costs about 0.5 ms more
client CPU (measured in one process, the options alternating, docs/performance.md); the session
builds a request object, header multidicts, timers and a body-writer task per request, none of
which DynamoDB's small JSON POSTs need. The framing of answers is not ours: `httptools` (the
binding of llhttp, Node's HTTP parser) reads every byte of them, so conflicting framing
(`Content-Length` beside chunked, two `Content-Length`s), a bad chunk or a bad head is an error,
never an answer. This module does the rest:

* a pool per endpoint, most recently used connection first, at most `limit` requests in flight;
* a connection is reused only if, at the moment it is taken, nothing is waiting to be read on
  its socket (a close, a reset or stray bytes the event loop has not handled yet), the event
  loop has not seen its peer close it, the last answer kept it alive (HTTP/1.1 without
  `Connection: close`), and it has been idle for less than `idle_limit_s`; one that was handed
  a request it did not answer completely (timeout, cancellation, a broken answer) is closed;
* 1xx interim answers are skipped; an answer framed by neither length nor chunks ends with the
  close (the one place where the end of an answer is ours to see: httptools does not expose
  llhttp's end-of-input call);
* connect and read timeouts (the read timeout restarts with every chunk of the answer);
* TLS through asyncio with the caller's `ssl.SSLContext`, and TCP keep-alive probes on request.

Failures come out as botocore's exceptions, which `dynamo.failures` maps once for every path: a
request found unsendable before any of its bytes reached the socket is `EndpointConnectionError`
(certainly not sent); a connection lost, or an answer that stopped or broke, after the request
reached the socket is `ConnectionClosedError` or `ReadTimeoutError` (sent, outcome unknown: the
server may have read it, even if it closed without a byte of answer).
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools
from botocore import exceptions as bce

#: At most this many bytes may arrive before an answer's head (status line and headers) ends.
MAX_HEAD_BYTES = 64 * 1024


@dataclass
class Answer:
    """One HTTP response, with the attribute names botocore's `after-call` handlers read:
    status code, headers (names lower-cased; trailers of a chunked answer included) and body."""

    status_code: int
    headers: dict[str, str]
    content: bytes


class BrokenAnswer(Exception):
    """The bytes that came back are not an HTTP/1.1 answer."""


class _Connection(asyncio.Protocol):
    """One connection; reads one answer at a time into `waiter`.

    The framing hooks (`_start`, `_feed`, `_feed_eof`) are the parser's; everything else is
    the exchange: the waiter, the read timeout, and whether the connection may be reused."""

    def __init__(self, loop: asyncio.AbstractEventLoop, url: str, read_timeout: float) -> None:
        self.loop = loop
        self.url = url
        self.read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self.poller: select.poll | None = None  # asks the socket whether anything waits
        self.closed = False  # the peer closed it, or it was lost
        self.reusable = True  # False once an answer did not keep it alive
        self.idle_since = 0.0
        self.waiter: asyncio.Future[Answer] | None = None
        self._last_data = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._start()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and hasattr(select, "poll"):
            self.poller = select.poll()
            self.poller.register(sock.fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:
            self.reusable = False  # bytes nobody asked for: never reused
            return
        self._last_data = self.loop.time()
        try:
            self._feed(data)
        except BrokenAnswer as exc:
            self._broken(str(exc))

    def eof_received(self) -> bool | None:
        self.closed = True
        if self.waiter is not None:
            try:
                answer = self._feed_eof()
            except BrokenAnswer as exc:
                self._broken(str(exc))
            else:
                self._finish(answer)
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None:
            reason = f"the connection was lost: {exc}" if exc else "the connection was closed"
            self._broken(reason)

    # --- one exchange -------------------------------------------------------------------------

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        """Write one request; the future gets its answer."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            raise self._unsent("the kept-alive connection was closed before writing")
        transport.write(data)
        if transport.is_closing():
            # The socket refused the first write (a reset or broken pipe): asyncio closes the
            # transport only when that first `send` fails, and then no byte left this host.
            raise self._unsent("the connection was reset before the request left")
        self.waiter = waiter = self.loop.create_future()
        self._last_data = self.loop.time()
        self._timer = self.loop.call_later(self.read_timeout, self._check_timeout)
        return waiter

    def _unsent(self, reason: str) -> bce.EndpointConnectionError:
        self.reusable = False
        return bce.EndpointConnectionError(endpoint_url=self.url, error=reason)

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
        self._start()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _broken(self, reason: str) -> None:
        self._fail(bce.ConnectionClosedError(endpoint_url=self.url, error=reason))

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

    # --- framing: httptools' callbacks --------------------------------------------------------

    def _start(self) -> None:
        """Ready for the next answer."""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._head_done = False
        self._head_bytes = 0

    def _feed(self, data: bytes) -> None:
        """Hand bytes to the parser; its callbacks finish the exchange once the answer is whole."""
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise BrokenAnswer("the server switched protocols") from None
        except httptools.HttpParserError as exc:
            if self.waiter is not None:
                raise BrokenAnswer(f"the answer is not HTTP/1.1: {exc}") from None
            self.reusable = False  # the answer was whole; what followed it was not
        if self.waiter is not None and not self._head_done:
            self._head_bytes += len(data)  # a head still unfinished: every byte of it counts
        if self._head_bytes > MAX_HEAD_BYTES:
            raise BrokenAnswer("the answer's head is too long")

    def _feed_eof(self) -> Answer:
        """The answer, if the close ends it (RFC 9112 §6.3: no length, no chunks)."""
        headers = self._headers
        unframed = "content-length" not in headers and "transfer-encoding" not in headers
        if self._head_done and unframed:
            self.reusable = False
            return Answer(self._parser.get_status_code(), headers, b"".join(self._body))
        raise BrokenAnswer("the connection closed before the answer was complete")

    def on_message_begin(self) -> None:
        if self.waiter is None:
            self.reusable = False  # a second answer to one request

    def on_header(self, name: bytes, value: bytes) -> None:
        # One read may hold a whole head and a large body: the head is measured by its headers.
        self._head_bytes += len(name) + len(value)
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._head_done = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self.waiter is None or self._head_bytes > MAX_HEAD_BYTES:
            return  # nobody asked, or `_feed` refuses the answer once the parser returns
        parser = self._parser
        status = parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            self._start()
            return
        if not parser.should_keep_alive():  # `Connection: close`, or HTTP/1.0 without keep-alive
            self.reusable = False
        self._finish(Answer(status, self._headers, b"".join(self._body)))


class Connections:
    """Keep-alive connections to one endpoint (see the module docstring)."""

    #: what each connection is (benchmarks swap in other parsers to compare them)
    connection_class: type[_Connection] = _Connection

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
                or _readable(connection)
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
                    lambda: self.connection_class(loop, url, read_timeout),
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


def _readable(connection: _Connection) -> bool:
    """True if something waits on an idle connection's socket: a close, a reset, or bytes
    nobody asked for, which the event loop has not handed to the connection yet."""
    poller = connection.poller
    if poller is None:  # no poll(2) (Windows): the event loop's view alone decides
        return False
    try:
        return bool(poller.poll(0))
    except OSError:
        return True


def request_bytes(path: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """One POST's bytes: request line, headers (with Content-Length) and body."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"POST {path} HTTP/1.1\r\n{head}content-length: {len(body)}\r\n\r\n".encode() + body
