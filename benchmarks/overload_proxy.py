"""The tests' capped proxy (tests/support/capped_proxy.py) in a process of its own.

    python -m benchmarks.overload_proxy --upstream http://127.0.0.1:PORT --per-second 30

prints its URL on the first line of stdout, then answers each line "counts" on stdin with one
JSON line of its counts (write items forwarded and throttled since the last "counts"). Its own
process, so the proxy's work does not share the measured client's event loop, and both
implementations go through the same proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.outage_proxy import ProxyProcess

ROOT = Path(__file__).resolve().parent.parent


async def serve(upstream: str, per_second: float) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.capped_proxy import capped_proxy

    loop = asyncio.get_running_loop()
    async with capped_proxy(upstream, per_second) as proxy:
        print(proxy.url, flush=True)
        while await loop.run_in_executor(None, sys.stdin.readline):
            print(json.dumps(dict(proxy.counts)), flush=True)
            proxy.counts.clear()


class CappedProcess(ProxyProcess):
    """The client side: start the proxy process, read its counts, stop it."""

    def __init__(self, upstream: str, per_second: float) -> None:
        super().__init__(upstream, "benchmarks.overload_proxy", "--per-second", str(per_second))
        self.per_second = per_second

    def counts(self) -> dict[str, Any]:
        """Write items forwarded and throttled since the last call."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("counts\n")
        self.process.stdin.flush()
        counts: dict[str, Any] = json.loads(self.process.stdout.readline())
        return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--per-second", type=float, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.upstream, args.per_second))


if __name__ == "__main__":
    main()
