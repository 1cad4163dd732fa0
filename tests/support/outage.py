"""A switchable outage in front of DynamoDB Local: a loopback proxy whose behaviour a test sets.

`async with outage_proxy(endpoint) as proxy:` then `proxy.mode = ...`:

- ``"pass"``:      forward every request and its answer;
- ``"hold"``:      forward (the write lands), then hold the answer up to `HOLD_S` (or until the
  mode changes) and drop the connection without answering;
- ``"slow_half"``: every other write (a deterministic alternation) is answered `SLOW_S` late;
- ``"throttle"``:  answer every request with ThrottlingException, without forwarding;
- ``"refuse"``:    stop listening and drop open connections: new connections are refused
  (`proxy.mode = "pass"` listens again on the same port);
- ``"drop"``:      forward (the write lands), then drop the connection without an answer;
- ``"error500"``:  answer every request 500 InternalServerError without forwarding (DynamoDB
  failing as a whole: the client cannot tell whether anything applied).

The engine itself is stopped with `stop_engine`/`resume_engine` (SIGSTOP/SIGCONT of its JVM,
never of a pid that may have been reused).
Deterministic: no randomness; what happens to a request depends only on the mode and on how many
writes came before it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from support.faultproxy import WRITES, FaultProxy, Request, _error, _write
from zae_limiter.local import RunningEngine
from zae_limiter.local.java import JAR_NAME, LAUNCHER_CLASS
from zae_limiter.local.processes import is_our_process

HOLD_S = 30.0
SLOW_S = 2.0
MODES = ("pass", "hold", "slow_half", "throttle", "refuse", "drop", "error500")


class OutageProxy(FaultProxy):
    """See the module docstring (FaultProxy's request parsing and forwarding, no random faults)."""

    def __init__(self, upstream: str) -> None:
        super().__init__(upstream, seed=0, rate=0.0)
        self._mode = "pass"
        self.port = 0
        self._writes = 0
        self._conns: set[asyncio.StreamWriter] = set()

    @property
    def mode(self) -> str:
        return self._mode

    async def set_mode(self, mode: str) -> None:
        """Switch modes; "refuse" closes the listener and every open connection."""
        assert mode in MODES, mode
        self._mode = mode
        if mode == "refuse" and self._server is not None:
            self._server.close()
            self._server = None
            for conn in list(self._conns):
                conn.close()
        elif mode != "refuse" and self._server is None:
            await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def start(self) -> OutageProxy:
        await super().start()
        assert self._server is not None
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            await super()._serve(reader, writer)
        finally:
            self._conns.discard(writer)

    async def _answer(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        self.requests += 1
        mode = self._mode
        if mode == "refuse":
            return False
        if mode == "throttle":
            self.counts["throttled"] += 1
            return await _write(writer, *_error(400, "ThrottlingException"))
        if mode == "error500":
            self.counts["error500"] += 1
            return await _write(writer, *_error(500, "InternalServerError"))
        slow = False
        if mode == "slow_half" and request.operation in WRITES:
            self._writes += 1
            slow = self._writes % 2 == 1
        answer = await self._forward(request)
        if mode == "drop":
            self.counts["dropped"] += 1
            return False
        if mode == "hold":
            self.counts["held"] += 1
            until = time.monotonic() + HOLD_S
            while self._mode == "hold" and time.monotonic() < until:
                await asyncio.sleep(0.05)
            return False  # the answer is never given
        if slow:
            self.counts["slowed"] += 1
            await asyncio.sleep(SLOW_S)
        return await _write(writer, *answer)


@asynccontextmanager
async def outage_proxy(upstream: str) -> AsyncIterator[OutageProxy]:
    proxy = await OutageProxy(upstream).start()
    try:
        yield proxy
    finally:
        await proxy.close()


def stop_engine(engine: RunningEngine | int) -> None:
    """Freeze DynamoDB Local (its JVM: the pid `start_engine` started is the java process):
    connections hang, nothing is answered. Signalled through its `Popen` (or, given a bare pid,
    after checking it is a DynamoDB Local): a pid whose process ended may belong to another
    process by now, and a stranger stopped (another test's jsii kernel, a history worker)
    would hang whatever waits on it."""
    _signal(engine, signal.SIGSTOP)


def resume_engine(engine: RunningEngine | int) -> None:
    _signal(engine, signal.SIGCONT)


def _signal(engine: RunningEngine | int, sig: int) -> None:
    if isinstance(engine, RunningEngine):
        sent = engine.signal(sig)
    else:
        sent = is_our_process(engine, (JAR_NAME, LAUNCHER_CLASS))
        if sent:
            os.kill(engine, sig)
    if not sent:
        raise RuntimeError(f"not signalled ({signal.Signals(sig).name}): {engine!r} is not running")
