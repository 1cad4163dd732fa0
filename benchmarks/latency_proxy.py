"""A recording HTTP proxy on 127.0.0.1 in front of DynamoDB Local, in a process of its own.

    python -m benchmarks.latency_proxy --upstream http://127.0.0.1:PORT --log FILE

Prints its port on the first line of stdout, then forwards every request unchanged and appends
one JSON line per request to FILE: the operation, the sizes that make an engine's work (request
body, update and condition expressions, the answer, i.e. the ALL_NEW image when asked for) and
four CLOCK_MONOTONIC stamps in ns (the same clock in every process on the machine):
`head` (request head read), `sent` (forwarded upstream), `answered` (the engine's answer read)
and `written` (the answer written back to the client). `answered - sent` is the engine's time
(DynamoDB Local, plus one loopback hop); the client's time before sending and after the answer
comes from comparing the client's own stamps with these.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import IO, Any

import aiohttp


class Recorder:
    def __init__(self, upstream: str, log: IO[str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.log = log
        self.session: aiohttp.ClientSession | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                t_head = time.monotonic_ns()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, value = line.split(":", 1)
                        headers[name.strip()] = value.strip()
                length = int(
                    next((v for k, v in headers.items() if k.lower() == "content-length"), 0)
                )
                body = await reader.readexactly(length) if length else b""
                await self.forward(writer, method, path, headers, body, t_head)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def forward(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        t_head: int,
    ) -> None:
        assert self.session is not None
        skip = {"host", "content-length", "connection", "transfer-encoding"}
        sent_headers = {k: v for k, v in headers.items() if k.lower() not in skip}
        t_sent = time.monotonic_ns()
        async with self.session.request(
            method, self.upstream + path, data=body, headers=sent_headers
        ) as response:
            data = await response.read()
            kept = {
                k: v
                for k, v in response.headers.items()
                if k.lower() not in ("content-length", "connection", "transfer-encoding")
            }
            status = response.status
        t_answered = time.monotonic_ns()
        out = [f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}"]
        out += [f"{k}: {v}" for k, v in kept.items()]
        out += [f"Content-Length: {len(data)}", "Connection: keep-alive", "", ""]
        writer.write("\r\n".join(out).encode("latin-1") + data)
        await writer.drain()
        t_written = time.monotonic_ns()
        self.record(headers, body, data, status, t_head, t_sent, t_answered, t_written)

    def record(
        self, headers: dict[str, str], body: bytes, answer: bytes, status: int, *stamps: int
    ) -> None:
        target = next((v for k, v in headers.items() if k.lower() == "x-amz-target"), "")
        try:
            request: dict[str, Any] = json.loads(body) if body else {}
        except ValueError:
            request = {}
        line = {
            "op": target.rsplit(".", 1)[-1],
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
        recorder = Recorder(upstream, log)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            recorder.session = session
            server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            print(port, flush=True)
            async with server:
                await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    asyncio.run(main_async(args.upstream, args.log))


if __name__ == "__main__":
    main()
