"""The tests' switchable outage proxy (tests/support/outage.py) in a process of its own.

    python -m benchmarks.outage_proxy --upstream http://127.0.0.1:PORT

prints its URL on the first line of stdout, then reads one mode a line on stdin ("pass", "hold",
"slow_half", "throttle", "refuse") and answers "ok" once the mode is set. Its own process, so the
proxy's work does not share the measured client's event loop (nor its interpreter lock), and both
implementations (ours here, 0.17.0 in its own venv) go through the same proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def serve(upstream: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.outage import outage_proxy

    loop = asyncio.get_running_loop()
    async with outage_proxy(upstream) as proxy:
        print(proxy.url, flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            await proxy.set_mode(line.strip())
            print("ok", flush=True)


class ProxyProcess:
    """The client side: start the proxy process, switch its mode, stop it."""

    def __init__(self, upstream: str, module: str = "benchmarks.outage_proxy", *more: str) -> None:
        """Start `python -m module --upstream upstream *more`, which prints its URL first."""
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, "--upstream", upstream, *more],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        if not self.url:
            raise RuntimeError(f"the proxy {module} did not start")

    def set_mode(self, mode: str) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(mode + "\n")
        self.process.stdin.flush()
        if self.process.stdout.readline().strip() != "ok":
            raise RuntimeError(f"the outage proxy did not take mode {mode!r}")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=40)  # a held answer lets go within HOLD_S
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    asyncio.run(serve(parser.parse_args().upstream))


if __name__ == "__main__":
    main()
