"""HTTP/1.1 conformance of the lean path's connections (`dynamo.connections`) against scripted
servers on 127.0.0.1: conflicting framing, answers cut at every byte, trailers, interim
answers, bodiless statuses, HTTP/1.0 and `Connection: close`, and servers that close (or reset)
a connection after an answer; each failure is checked through the one mapping,
`dynamo.failures.classify`, for what it means: not sent, or an unknown outcome."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import zlib
from collections.abc import Iterator

import pytest
from botocore import exceptions as bce

from support.loopback import Reply, scripted
from zae_limiter import instrumentation as outcomes
from zae_limiter.dynamo import connections
from zae_limiter.dynamo.connections import Answer, Connections, request_bytes
from zae_limiter.dynamo.failures import UnknownOutcome, classify

BODY = json.dumps({"Item": {"pk": {"S": "a"}, "n": {"N": "1"}}}).encode()
CRC = f"x-amz-crc32: {zlib.crc32(BODY)}".encode()
REQUEST = request_bytes("/", {"host": "127.0.0.1"}, b"{}")


def framed(*head: bytes, body: bytes = BODY, status: bytes = b"200 OK") -> bytes:
    """An HTTP/1.1 answer with exactly these header lines (no framing added)."""
    return b"\r\n".join([b"HTTP/1.1 " + status, *head, b"", body])


def chunked(body: bytes = BODY, trailers: bytes = b"") -> bytes:
    """`body` in two chunks (one with an extension), then the last chunk and `trailers`."""
    half = len(body) // 2
    parts = [
        b"%x\r\n%s\r\n" % (half, body[:half]),
        b"%x;x=y\r\n%s\r\n" % (len(body) - half, body[half:]),
    ]
    return b"".join(parts) + b"0\r\n" + trailers + b"\r\n"


LENGTH = b"Content-Length: %d" % len(BODY)
CHUNKED = b"Transfer-Encoding: chunked"


def pool(url: str, read_timeout: float = 5.0) -> Connections:
    return Connections(
        url,
        ssl_context=None,
        connect_timeout=5.0,
        read_timeout=read_timeout,
        limit=4,
        idle_limit_s=15.0,
    )


def sends(answer: bytes, *, close: bool = False) -> Reply:
    """A server reply: these bytes for every request, then (if `close`) the close, at once."""

    async def reply(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(answer)
        if close:
            writer.close()

    return reply


async def exchanges(reply: Reply, n: int) -> tuple[list[Answer], int]:
    """`n` requests, one after another, to a server answering with `reply`; the answers and
    how many connections they took."""
    async with scripted(reply) as server:
        client = pool(server.url)
        try:
            answers = [await client.post(REQUEST) for _ in range(n)]
        finally:
            await client.close()
    assert len(server.requests) == n
    return answers, server.connections


async def failure(reply: Reply) -> BaseException:
    """What one request to a server answering with `reply` raises (it must raise)."""
    async with scripted(reply) as server:
        client = pool(server.url, read_timeout=2.0)
        try:
            with pytest.raises(Exception) as caught:
                await client.post(REQUEST)
        finally:
            await client.close()
    assert len(server.requests) == 1
    return caught.value


def unknown_outcome(exc: BaseException) -> bool:
    """`exc`, raised by a write, means "sent, outcome unknown" to the library."""
    meaning = classify(exc, "UpdateItem", write=True)
    return meaning.outcome == outcomes.UNKNOWN and isinstance(meaning.error, UnknownOutcome)


# --- framing that must be refused --------------------------------------------------------------

CONFLICTING = {
    "Content-Length and chunked": framed(LENGTH, CHUNKED, body=chunked()),
    "chunked and Content-Length": framed(CHUNKED, LENGTH, body=chunked()),
    "two different Content-Lengths": framed(b"Content-Length: 7", LENGTH),
    "two Content-Lengths in one header": framed(b"Content-Length: 7, %d" % len(BODY)),
    "a bad chunk size": framed(CHUNKED, body=b"zz\r\n" + BODY + b"\r\n0\r\n\r\n"),
    "not HTTP": b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    "a switch of protocols": framed(b"Upgrade: h2c", b"Connection: Upgrade", status=b"101 X"),
}


@pytest.mark.parametrize("answer", list(CONFLICTING.values()), ids=list(CONFLICTING))
async def test_conflicting_or_broken_framing_is_a_transport_failure_never_an_answer(
    answer: bytes,
) -> None:
    exc = await failure(sends(answer))
    assert isinstance(exc, bce.ConnectionClosedError), exc
    assert unknown_outcome(exc)  # the request was sent: a write's outcome is unknown
    meaning = classify(exc, "GetItem", write=False)
    assert meaning.outcome == outcomes.UNKNOWN and meaning.retry_cost > 0  # a read is retried


# --- answers read whole ------------------------------------------------------------------------

SPLIT = {
    "Content-Length": framed(LENGTH, CRC),
    "chunked with trailers": framed(CHUNKED, body=chunked(trailers=CRC + b"\r\nx-b: 2\r\n")),
    "100 Continue and 103 first": b"HTTP/1.1 100 Continue\r\n\r\n"
    + b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
    + framed(LENGTH, CRC),
}


@pytest.mark.parametrize("answer", list(SPLIT.values()), ids=list(SPLIT))
async def test_an_answer_cut_at_every_byte_is_read_whole_on_one_connection(
    answer: bytes,
) -> None:
    """For every cut, the client's socket hands it the bytes before the cut, then the rest."""
    reads: list[int] = []
    read = asyncio.Event()

    class Spied(connections._Connection):
        def data_received(self, data: bytes) -> None:
            reads.append(len(data))
            super().data_received(data)
            read.set()

    cuts = list(range(1, len(answer)))
    next_cut = iter(cuts)

    async def cut_in_two(body: bytes, writer: asyncio.StreamWriter) -> None:
        cut = next(next_cut)
        read.clear()
        writer.write(answer[:cut])
        await read.wait()  # the client has read the first part alone
        writer.write(answer[cut:])

    async with scripted(cut_in_two) as server:
        client = pool(server.url)
        client.connection_class = Spied
        try:
            answers = [await client.post(REQUEST) for _ in cuts]
        finally:
            await client.close()
    assert reads == [n for cut in cuts for n in (cut, len(answer) - cut)]
    assert {(a.status_code, a.content, a.headers["x-amz-crc32"]) for a in answers} == {
        (200, BODY, str(zlib.crc32(BODY)))
    }
    assert server.connections == 1


async def test_a_large_answer_in_one_read_is_read_whole() -> None:
    # The head and a body far larger than MAX_HEAD_BYTES in one write: the first read holds
    # both, and only an unfinished head may count against the limit (a manifest record's
    # chunks came back as "connection closed" when the whole read was counted).
    body = json.dumps({"Items": [{"pk": {"S": "x" * 1000}}] * 400}).encode()
    assert len(body) > 4 * connections.MAX_HEAD_BYTES
    answer = framed(b"Content-Length: %d" % len(body), body=body)
    answers, opened = await exchanges(sends(answer), 2)
    assert [a.content for a in answers] == [body, body]
    assert opened == 1


async def test_a_head_longer_than_the_limit_is_a_broken_answer() -> None:
    padding = b"x-pad: " + b"p" * 1000
    lines = [padding] * (connections.MAX_HEAD_BYTES // 1000 + 1)
    exc = await failure(sends(framed(LENGTH, *lines)))
    assert isinstance(exc, bce.ConnectionClosedError)
    assert unknown_outcome(exc)


async def test_trailers_join_the_headers_and_keep_the_connection() -> None:
    answer = framed(CHUNKED, body=chunked(trailers=CRC + b"\r\nx-b: 2\r\n"))
    answers, opened = await exchanges(sends(answer), 3)
    assert [(a.content, a.headers["x-amz-crc32"], a.headers["x-b"]) for a in answers] == [
        (BODY, str(zlib.crc32(BODY)), "2")
    ] * 3
    assert opened == 1


KEEP_ALIVE = {
    # name: (answer, its status, its body, whether the connection is used again)
    "HTTP/1.1": (framed(LENGTH), 200, BODY, True),
    "interim answers first": (
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n" + framed(LENGTH),
        200,
        BODY,
        True,
    ),
    "204 without a body": (b"HTTP/1.1 204 No Content\r\n\r\n", 204, b"", True),
    "304 whose Content-Length is not a body": (
        b"HTTP/1.1 304 Not Modified\r\n" + LENGTH + b"\r\n\r\n",
        304,
        b"",
        True,
    ),
    "Connection: close": (framed(b"Connection: close", LENGTH), 200, BODY, False),
    "HTTP/1.0": (b"HTTP/1.0" + framed(LENGTH)[8:], 200, BODY, False),
    "HTTP/1.0 with keep-alive": (
        b"HTTP/1.0" + framed(b"Connection: keep-alive", LENGTH)[8:],
        200,
        BODY,
        True,
    ),
}


@pytest.mark.parametrize(
    ("answer", "status", "body", "kept"), list(KEEP_ALIVE.values()), ids=list(KEEP_ALIVE)
)
async def test_each_answer_is_read_and_its_connection_kept_only_if_it_says_so(
    answer: bytes, status: int, body: bytes, kept: bool
) -> None:
    """The server never closes: only what the answer says decides whether it is used again."""
    answers, opened = await exchanges(sends(answer), 3)
    assert [(a.status_code, a.content) for a in answers] == [(status, body)] * 3
    assert opened == (1 if kept else 3)


@pytest.mark.parametrize("version", [b"HTTP/1.1", b"HTTP/1.0"])
async def test_an_answer_without_length_or_chunks_ends_with_the_close(version: bytes) -> None:
    answers, opened = await exchanges(sends(version + b" 200 OK\r\n\r\n" + BODY, close=True), 2)
    assert [a.content for a in answers] == [BODY, BODY]
    assert opened == 2


# --- closes and resets around an answer --------------------------------------------------------


async def test_a_close_right_after_the_answer_is_seen_before_the_next_request() -> None:
    """The server closes without saying so as soon as it has answered; the next request,
    written at once (no turn of the event loop in between), goes on a new connection."""
    answers, opened = await exchanges(sends(framed(LENGTH), close=True), 20)
    assert [a.content for a in answers] == [BODY] * 20
    assert opened == 20


async def test_a_close_a_while_after_the_answer_is_seen_before_the_next_request() -> None:
    async def close_later(body: bytes, writer: asyncio.StreamWriter) -> None:
        writer.write(framed(LENGTH))
        asyncio.get_running_loop().call_later(0.03, writer.close)

    async with scripted(close_later) as server:
        client = pool(server.url)
        try:
            for _ in range(3):
                assert (await client.post(REQUEST)).content == BODY
                await asyncio.sleep(0.06)  # the close (its timer is due first) comes meanwhile
        finally:
            await client.close()
    assert server.connections == 3


def aborting(linger: bool) -> Reply:
    """Reads the request, then closes: with a reset if `linger`, else with a FIN."""

    async def reply(body: bytes, writer: asyncio.StreamWriter) -> None:
        if linger:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    return reply


@pytest.mark.parametrize("linger", [False, True], ids=["close", "reset"])
async def test_a_request_the_server_read_and_dropped_is_an_unknown_outcome(linger: bool) -> None:
    """Not a byte of answer proves nothing: the server had the request and may have applied
    it before it closed, so a write's outcome stays unknown."""
    exc = await failure(aborting(linger))
    assert isinstance(exc, bce.ConnectionClosedError)
    assert unknown_outcome(exc)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    yield sock
    sock.close()


async def test_a_reset_found_when_writing_means_not_sent(listener: socket.socket) -> None:
    """The server resets a kept-alive connection; the next write fails at the socket before a
    byte leaves, which proves the server never had the request: safe to send again."""
    loop = asyncio.get_running_loop()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    client = pool(url)
    try:
        exchange = asyncio.ensure_future(client.post(REQUEST))
        peer, _ = await loop.sock_accept(listener)
        received = b""
        while len(received) < len(REQUEST):
            received += await loop.sock_recv(peer, 65536)
        await loop.sock_sendall(peer, framed(LENGTH))
        assert (await exchange).content == BODY
        (connection,) = client._idle
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # a reset, which this connection's event loop has not handled yet
        with pytest.raises(bce.EndpointConnectionError) as caught:
            connection.send(REQUEST)
    finally:
        await client.close()
    meaning = classify(caught.value, "UpdateItem", write=True)
    assert meaning.outcome == outcomes.NOT_SENT and meaning.retry_cost > 0
