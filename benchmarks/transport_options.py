"""Client CPU per warm acquire over each HTTP transport option, in one process, one run.

    .venv/bin/python -m benchmarks.transport_options [--rounds 4] [--block 500]
        [--options httptools,h11,aiohttp] [--out benchmarks/results/<date>-transport.json]

Starts DynamoDB Local on 127.0.0.1 and opens one limiter per option on its own table, all at
once; warms each (300 acquires), then runs blocks of `--block` warm single-resource acquires
(one UpdateItem each) in the order A B C C B A per round, so that drift on a shared machine hits
every option alike; client CPU is `time.process_time` (the JVM is another process). Options:

* `httptools`: the library's own connections, answers framed by httptools (llhttp): the default;
* `h11`: the same connections, answers framed by h11 (pure Python), which needs each request's
  head and end sent through it too (`H11Connection` below, a benchmark-only variant);
* `aiohttp`: one `aiohttp.ClientSession` carries the lean path (`ZAEL_TRANSPORT=aiohttp`).

Prints every block's figure, the median per option and the median of the paired differences
from the first option (block i of each ran beside block i of the others), and writes them as
JSON with `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import h11

from zae_limiter import Limit, RateLimiter, Repository
from zae_limiter.dynamo import connections
from zae_limiter.local import (
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    start_engine,
)

ENTITIES = 100
#: option -> (ZAEL_TRANSPORT, connection class of the own connections, if any)
OPTIONS: dict[str, tuple[str, type[connections._Connection] | None]] = {}


class H11Connection(connections._Connection):
    """The library's connection with h11 reading the answers instead of httptools."""

    def _start(self) -> None:
        super()._start()
        self._h11: h11.Connection | None = None

    def _client(self) -> h11.Connection:
        """h11 reads an answer only after it has sent a request: the head and end go through
        it (the bytes themselves are the library's, already written)."""
        if self._h11 is None:
            self._h11 = h11.Connection(h11.CLIENT)
            self._h11.send(h11.Request(method="POST", target="/", headers=[("host", "x")]))
            self._h11.send(h11.EndOfMessage())
        return self._h11

    def _feed(self, data: bytes) -> None:
        self._events(data)

    def _feed_eof(self) -> connections.Answer:
        answer = self._events(b"")
        if answer is None:
            raise connections.BrokenAnswer("the connection closed before the answer was complete")
        return answer

    def _events(self, data: bytes) -> connections.Answer | None:
        client = self._client()
        client.receive_data(data)
        while True:
            try:
                event = client.next_event()
            except h11.RemoteProtocolError as exc:
                raise connections.BrokenAnswer(str(exc)) from None
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return None
            if isinstance(event, h11.Response):
                self._status = event.status_code
                self._headers = {k.decode(): v.decode("latin-1") for k, v in event.headers}
            elif isinstance(event, h11.Data):
                self._body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                answer = connections.Answer(self._status, self._headers, b"".join(self._body))
                if client.their_state is not h11.DONE or client.our_state is not h11.DONE:
                    self.reusable = False
                self._finish(answer)
                return answer
            elif isinstance(event, h11.ConnectionClosed):
                raise connections.BrokenAnswer("the connection closed")


OPTIONS.update(
    {
        "httptools": ("http", connections._Connection),
        "h11": ("http", H11Connection),
        "aiohttp": ("aiohttp", None),
    }
)


async def open_option(endpoint: str, option: str) -> tuple[Repository, RateLimiter]:
    choice, connection_class = OPTIONS[option]
    os.environ["ZAEL_TRANSPORT"] = choice
    table = f"transport-options-{option}"
    await Repository.create_table(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    repo = await Repository.open(table=table, endpoint_url=endpoint, region=LOCAL_REGION)
    http = repo._store.transport.http
    assert http is not None, "the lean path carries every option"
    if connection_class is not None:
        assert http.connections is not None
        http.connections.connection_class = connection_class
        await http.connections.close()  # the ones `open` made are of the default class
    else:
        assert http.connections is None
    limiter = RateLimiter(repo)
    await limiter.set_resource_defaults("api", [Limit.per_minute("rpm", 10**12)])
    return repo, limiter


def check_carrier(repo: Repository, option: str) -> None:
    """Every connection the option kept is of its class (the figures are the option's)."""
    http = repo._store.transport.http
    kind = OPTIONS[option][1]
    if http is not None and http.connections is not None and kind is not None:
        idle = http.connections._idle
        assert idle and all(type(c) is kind for c in idle), f"{option}: {idle}"


async def block(limiter: RateLimiter, calls: int) -> float:
    """Client CPU µs per warm acquire over `calls` acquires."""
    started = time.process_time()
    for i in range(calls):
        async with limiter.acquire(f"u{i % ENTITIES}", "api", {"rpm": 1}):
            pass
    return (time.process_time() - started) / calls * 1e6


async def measure(
    endpoint: str, options: list[str], rounds: int, calls: int
) -> dict[str, list[float]]:
    opened = {option: await open_option(endpoint, option) for option in options}
    try:
        for _, limiter in opened.values():
            await block(limiter, 300)  # warm: entities loaded, connections open
        results: dict[str, list[float]] = {option: [] for option in options}
        order = options + options[::-1]  # A B C C B A
        for _ in range(rounds):
            for option in order:
                results[option].append(await block(opened[option][1], calls))
        return results
    finally:
        for option, (repo, _) in opened.items():
            check_carrier(repo, option)
            await repo.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--options", default=",".join(OPTIONS))
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    options = [o for o in args.options.split(",") if o]
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        parser.error(f"unknown option {unknown[0]!r}; choose from {', '.join(OPTIONS)}")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    load_before = os.getloadavg()
    engine = start_engine()
    try:
        results = asyncio.run(measure(engine.endpoint_url, options, args.rounds, args.block))
    finally:
        engine.stop()
    medians = {option: statistics.median(figures) for option, figures in results.items()}
    first = options[0]
    # block i of each option ran next to block i of the others (same round, same half)
    paired = {
        option: statistics.median(b - a for a, b in zip(results[first], figures, strict=True))
        for option, figures in results.items()
        if option != first
    }
    print(
        f"client CPU per warm acquire (us), {args.rounds} rounds of A B C C B A, "
        f"{args.block} acquires per block:"
    )
    for option, figures in results.items():
        listed = ", ".join(f"{f:.0f}" for f in figures)
        print(f"  {option:9s} median {medians[option]:5.0f}   blocks {listed}")
    for option, difference in paired.items():
        print(f"  {option} - {first}: median of paired block differences {difference:+.0f} us")
    if args.out:
        report: dict[str, Any] = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "command": f"python -m benchmarks.transport_options --rounds {args.rounds} "
            f"--block {args.block} --options {','.join(options)}",
            "python": platform.python_version(),
            "load_before": list(load_before),
            "load_after": list(os.getloadavg()),
            "cpu_us_per_warm_acquire": results,
            "median_us": medians,
            f"median_paired_difference_vs_{first}_us": paired,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
