"""Our engine processes: recognising them by their command line, stopping them by pid."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from zae_limiter.local.java import JAR_NAME, LAUNCHER_CLASS

#: In the background aggregator's command line (`python -m zae_limiter.local.stream_runner`).
AGGREGATOR_MARKER = "zae_limiter.local.stream_runner"
# Markers used to recognise our own processes (engines and the aggregator) before signalling a
# recorded pid.
PROCESS_MARKERS: tuple[str, ...] = (
    LAUNCHER_CLASS,
    JAR_NAME,
    "zae_limiter.local._moto_main",
    AGGREGATOR_MARKER,
)


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def process_cmdline(pid: int) -> str | None:
    """The command line of a live process, or None if there is no such process."""
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            status = (proc / "status").read_text()
            if re.search(r"^State:\s+Z", status, re.M):
                return None  # a zombie is as good as gone
            return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
    if sys.platform.startswith("linux"):
        return None
    try:
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_our_process(pid: int, markers: Sequence[str] = PROCESS_MARKERS) -> bool:
    """True if `pid` is alive and its command line carries one of our markers."""
    cmdline = process_cmdline(pid)
    return cmdline is not None and any(marker in cmdline for marker in markers)


def stop_pid(
    pid: int,
    *,
    markers: Sequence[str] = PROCESS_MARKERS,
    timeout: float = 10.0,
    popen: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Stop one recorded process: SIGTERM, wait, then SIGKILL. Never signals a stranger.

    Returns True if the process was ours and was running.
    """
    if not is_our_process(pid, markers):
        if popen is not None:
            with contextlib.suppress(Exception):
                popen.wait(timeout=0)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout, popen):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, timeout, popen)
    return True


def _wait_gone(pid: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            try:
                popen.wait(timeout=0.05)
                return True
            except subprocess.TimeoutExpired:
                continue
        if process_cmdline(pid) is None:
            return True
        time.sleep(0.05)
    return False


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGTERM when this process dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec
