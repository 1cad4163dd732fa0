"""A recording HTTP proxy on 127.0.0.1 in front of DynamoDB Local, in a process of its own.

    python -m benchmarks.latency_proxy --upstream http://127.0.0.1:PORT --log FILE

The test suite's proxy (tests/support/faultproxy.py) with no faults, recording instead. Prints
its port on the first line of stdout, forwards every request unchanged and appends one JSON line
per request to FILE: the operation, the sizes that make an engine's work (request body, update
and condition expressions, the answer, i.e. the ALL_NEW image when asked for) and four
CLOCK_MONOTONIC stamps in ns (the same clock in every process on the machine): `head` (request
read), `sent` (forwarded upstream), `answered` (the engine's answer read) and `written` (the
answer written back). `answered - sent` is the engine's time (DynamoDB Local, plus one loopback
hop); the client's own time comes from comparing the client's stamps with these.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.faultproxy import FaultProxy, Request, _write


class RecordingProxy(FaultProxy):
    """Forwards every request (no faults) and logs its stamps and sizes to `log`."""

    def __init__(self, upstream: str, log: IO[str]) -> None:
        super().__init__(upstream, seed=0, rate=0.0)
        self.log = log

    async def _answer(self, writer: asyncio.StreamWriter, request: Request) -> bool:
        t_head = time.monotonic_ns()
        self.requests += 1
        t_sent = time.monotonic_ns()
        status, kept, data = await self._forward(request)
        t_answered = time.monotonic_ns()
        written = await _write(writer, status, kept, data)
        self.record(request, data, status, t_head, t_sent, t_answered, time.monotonic_ns())
        return written

    def record(self, request: Request, answer: bytes, status: int, *stamps: int) -> None:
        body = request.body
        try:
            request: dict[str, Any] = json.loads(body) if body else {}
        except ValueError:
            request = {}
        line = {
            "op": request.operation,
            "status": status,
            "request_bytes": len(body),
            "answer_bytes": len(answer),
            "update_expression_chars": len(request.get("UpdateExpression", "")),
            "condition_expression_chars": len(request.get("ConditionExpression", "")),
            "names": len(request.get("ExpressionAttributeNames", {})),
            "values": len(request.get("ExpressionAttributeValues", {})),
            "return_values": request.get("ReturnValues", "NONE"),
            **dict(zip(("head", "sent", "answered", "written"), stamps, strict=True)),
        }
        self.log.write(json.dumps(line) + "\n")


async def main_async(upstream: str, log_path: str) -> None:
    with open(log_path, "a", buffering=1) as log:
        proxy = await RecordingProxy(upstream, log).start()
        print(proxy.url.rsplit(":", 1)[1], flush=True)
        try:
            await asyncio.Event().wait()  # until terminated
        finally:
            await proxy.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    asyncio.run(main_async(args.upstream, args.log))


if __name__ == "__main__":
    main()
