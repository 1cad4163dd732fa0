"""A seeded, fault-injecting HTTP proxy on 127.0.0.1 in front of DynamoDB Local.

Point a `Repository` at `proxy.url` and every request goes through it. For each request whose
operation is in `operations` (writes, by default) the proxy decides from the request's identity,
not from the order requests arrive in nor from the writer that sent it: a hash of the seed, the
operation, the item(s) it names (its `Key`, or the key attributes of its `Item`; every item of a
transaction) and how many requests for those items this proxy saw before. So a seed replays: the
same process sending the same sequence of writes to an item meets the same faults, whatever its
random writer id, the times in its bodies or its other items' traffic. With probability `rate`
it injects one of `kinds`, and never more than `max_per_request` times in a row on one identity,
so a request re-sent or retried by the client always gets through in the end (a run cannot fail
on a streak of draws the client's retry bounds were never meant for):

- ``lost``:     forward, let DynamoDB apply it, then close the connection without an answer
- ``latency``:  forward, then hold the answer for `delay_s` (longer than the client's read timeout)
- ``throttle``: answer 400 ``ThrottlingException`` without forwarding (certainly not applied)
- ``5xx``:      answer 500 ``InternalServerError``, after forwarding or not (a coin toss)
- ``late``:     hold the request for `delay_s`, then forward it and drop the answer (it lands
  after the client gave up on it, possibly after its re-send); not among the default kinds

`partition(seconds)` opens a span in which every request, whatever its operation, hangs and is
dropped: some are forwarded first (they may land), some never are (again by identity). Partitions
are counted under ``partition``.

A test that must see a fault sets `at_least`: the first that many requests of `operations` are
faulted whatever their draw (a kind still drawn from their identity). Request bodies carry
random writer ids, so how many requests a seed's rate hits differs from run to run; with few
requests it can be none. Which requests come first may vary; that the faults happen does not.

It is bounded: at most `max_faults` faults and none after `seconds` have passed since it started
(it then only forwards, so a run always ends), and it stops serving when closed. `counts` tells
what was injected, `requests` how many requests it saw.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp

KINDS = ("lost", "latency", "throttle", "5xx")
EXTRA_KINDS = ("late",)
WRITES = ("UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def items_of(body: bytes) -> bytes:
    """What names a request's item(s): its `Key`, the key attributes of its `Item`, every item
    of a transaction or batch (sorted), else the whole body."""
    try:
        request = json.loads(body)
    except ValueError:
        return body
    found: list[str] = []

    def visit(node: object) -> None:
        if isinstance(node, dict):
            if "Key" in node:
                found.append(json.dumps(node["Key"], sort_keys=True))
            elif "Item" in node and isinstance(node["Item"], dict):
                item = node["Item"]
                keys = {k: v for k, v in item.items() if k in ("PK", "SK")} or item
                found.append(json.dumps(keys, sort_keys=True))
            else:
                for value in node.values():
                    visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(request)
    return "|".join(sorted(found)).encode() if found else body


def _error(status: int, code: str) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "injected"})
    return status, {"Content-Type": "application/x-amz-json-1.0"}, body.encode()


@dataclass(frozen=True)
class Request:
    """One request as the proxy read it; what `FaultProxy._answer` (the hook) decides on."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def operation(self) -> str:
        """The DynamoDB operation: "UpdateItem", "GetItem", ..."""
        target = next((v for k, v in self.headers.items() if k.lower() == "x-amz-target"), "")
        return target.rsplit(".", 1)[-1]


class FaultProxy:
    """See the module docstring. Subclasses change what happens to a request by overriding
    `_answer(writer, request)`, and reach DynamoDB Local with `_forward(request)`."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int,
        rate: float,
        kinds: tuple[str, ...] = KINDS,
        operations: tuple[str, ...] = WRITES,
        delay_s: float = 1.0,
        max_faults: int = 1_000,
        seconds: float = 120.0,
        max_per_request: int = 2,
        at_least: int = 0,
    ) -> None:
        assert set(kinds) <= set(KINDS + EXTRA_KINDS), kinds
        self.upstream = upstream.rstrip("/")
        self.seed = seed
        self.max_per_request = max_per_request
        self.at_least = at_least
        self._forced = 0  # requests faulted because of `at_least`
        self._seen: Counter[bytes] = Counter()  # requests per identity (the items named)
        self._streak: Counter[bytes] = Counter()  # faults in a row per identity
        self._last = b""  # the identity of the request drawn last
        self._copies: Counter[bytes] = Counter()  # faults per exact request body
        self._last_copy = b""  # the body of the request drawn last
        self._partition_until = 0.0
        self.rate = rate
        self.kinds = kinds
        self.operations = operations
        self.delay_s = delay_s
        self.max_faults = max_faults
        self.seconds = seconds
        self.counts: Counter[str] = Counter()
        self.requests = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._started = 0.0
        self._held: set[asyncio.Task[None]] = set()

    @property
    def faults(self) -> int:
        return sum(self.counts.values())

    async def start(self) -> FaultProxy:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=128), auto_decompress=False
        )
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._started = time.monotonic()
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._held):
            task.cancel()
        await asyncio.gather(*self._held, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    def partition(self, seconds: float) -> None:
        """From now on for `seconds`, every request hangs and is dropped (see the docstring)."""
        self._partition_until = max(self._partition_until, time.monotonic() + seconds)

    def _identity(self, operation: str, body: bytes) -> tuple[float, float, float]:
        """Three uniform draws in [0, 1) from the seed, the items the request names and how
        many requests for them came before (1.0 first after `max_per_request` faults in a row
        on those items, or on this very body: a client's retries of one request get through even
        while other writers' requests to the same items take the item's passes)."""
        digest = hashlib.blake2b(f"{self.seed}/{operation}/".encode() + items_of(body),
                                 digest_size=16)  # fmt: skip
        key = self._last = digest.digest()
        copy = self._last_copy = hashlib.blake2b(body, digest_size=16).digest()
        ordinal = self._seen[key]
        self._seen[key] += 1
        if self._copies[copy] >= self.max_per_request:
            return 1.0, 0.0, 0.0
        if self._streak[key] >= self.max_per_request:
            self._streak[key] = 0
            return 1.0, 0.0, 0.0
        digest.update(ordinal.to_bytes(4, "big"))
        word = int.from_bytes(digest.digest(), "big")
        mask = 2**40 - 1
        return (word & mask) / 2**40, (word >> 40 & mask) / 2**40, (word >> 80 & mask) / 2**40

    def _draw(self, operation: str, body: bytes) -> tuple[str | None, float]:
        """The fault for one request (or None) and a coin for the kinds that toss one."""
        if time.monotonic() < self._partition_until:
            return "partition", self._identity("partition", body)[2]
        if operation not in self.operations or self.faults >= self.max_faults:
            return None, 0.0
        if time.monotonic() - self._started > self.seconds:
            return None, 0.0
        chance, pick, coin = self._identity(operation, body)
        key = self._last
        if chance >= self.rate:
            if chance >= 1.0 or self._forced >= self.at_least:  # 1.0: its streak is spent
                self._streak[key] = 0
                return None, 0.0
            self._forced += 1
        self._streak[key] += 1
        self._copies[self._last_copy] += 1
        # Every kind once first: how many faults a run draws depends on how many requests fit
        # in its `seconds`, which a loaded machine cuts (a kind drawn by `pick` alone could miss).
        missing = [kind for kind in self.kinds if not self.counts[kind]]
        return missing[0] if missing else self.kinds[int(pick * len(self.kinds))], coin

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._held.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                if not head.strip():
                    continue
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip()] = value.strip()
                length = int(
                    next((v for k, v in headers.items() if k.lower() == "content-length"), 0)
                )
                body = await reader.readexactly(length) if length else b""
                if not await self._answer(writer, Request(method, path, headers, body)):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return  # the client went away, or the proxy is closing
        finally:
            self._held.discard(task)
            writer.close()

    async def _answer(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        """Answer one request; False when the connection is to be dropped."""
        self.requests += 1
        fault, coin = self._draw(request.operation, request.body)
        if fault == "partition":
            self.counts[fault] += 1
            if coin < 0.5:
                await self._forward(request)  # it may land; no answer
            await asyncio.sleep(max(0.0, self._partition_until - time.monotonic()))
            return False
        if fault == "throttle":
            self.counts[fault] += 1
            return await _write(writer, *_error(400, "ThrottlingException"))
        if fault == "late":
            self.counts[fault] += 1
            await asyncio.sleep(self.delay_s)
            await self._forward(request)
            return False
        if fault == "5xx" and coin < 0.5:
            self.counts["5xx"] += 1  # refused before applying
            return await _write(writer, *_error(500, "InternalServerError"))
        answer = await self._forward(request)
        if fault is not None:
            self.counts[fault] += 1
        if fault == "lost":
            return False
        if fault == "latency":
            await asyncio.sleep(self.delay_s)  # the client has given up by now
            return False
        if fault == "5xx":
            return await _write(writer, *_error(500, "InternalServerError"))
        return await _write(writer, *answer)

    async def _forward(self, request: Request) -> tuple[int, dict[str, str], bytes]:
        assert self._session is not None
        skip = {"host", "content-length", "connection", "transfer-encoding"}
        sent = {k: v for k, v in request.headers.items() if k.lower() not in skip}
        async with self._session.request(
            request.method, self.upstream + request.path, data=request.body, headers=sent
        ) as response:
            data = await response.read()
            kept = {
                k: v
                for k, v in response.headers.items()
                if k.lower() not in ("content-length", "connection", "transfer-encoding")
            }
            return response.status, kept, data


async def _write(
    writer: asyncio.StreamWriter, status: int, headers: dict[str, str], body: bytes
) -> bool:
    lines = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: keep-alive", "", ""]
    writer.write("\r\n".join(lines).encode("latin-1") + body)
    try:
        await writer.drain()
    except ConnectionError:
        return False
    return True


@asynccontextmanager
async def fault_proxy(upstream: str, **settings: object) -> AsyncIterator[FaultProxy]:
    """`async with fault_proxy(endpoint, seed=1, rate=0.1) as proxy:` (see FaultProxy)."""
    proxy = FaultProxy(upstream, **settings)  # type: ignore[arg-type]
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


@asynccontextmanager
async def limiter_behind_proxy(
    table: Any, seed: int, **repository: Any
) -> AsyncIterator[tuple[FaultProxy, Any]]:
    """(proxy, RateLimiter) on `table` (a TableRef) reached through a fault proxy that injects
    nothing until told (`proxy.partition(...)`). On the way out the proxy closes first and the
    repository does not wait for what a partition left unresolved."""
    from zae_limiter import RateLimiter, Repository

    async with fault_proxy(table.endpoint_url, seed=seed, rate=0.0) as proxy:
        repo = await Repository.open(table=table.name, endpoint_url=proxy.url, **repository)
        try:
            yield proxy, RateLimiter(repo)
        finally:
            await proxy.close()
            await repo.close(timeout=0.1)
