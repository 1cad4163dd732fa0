"""Signals to an engine reach its process or nothing: never a pid that a process which ended
left behind (pids wrap, at 32,768 on the test machine, and another worker's jsii kernel or
history worker stopped with SIGSTOP hangs whatever waits on it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.outage import resume_engine, stop_engine
from zae_limiter.local import RunningEngine


def _reaches(pid: int, stopped: bool) -> bool:
    """Whether our child comes to be reported stopped (or continued) by `waitpid`, which does not
    reap it: a signal is taken asynchronously."""
    flags = (os.WUNTRACED if stopped else os.WCONTINUED) | os.WNOHANG
    seen = os.WIFSTOPPED if stopped else os.WIFCONTINUED
    for _ in range(1_000):  # a hang guard (10 s), not a timing assertion
        got, status = os.waitpid(pid, flags)
        if got == pid and seen(status):
            return True
        time.sleep(0.01)
    return False


def _engine(process: subprocess.Popen[bytes]) -> RunningEngine:
    return RunningEngine(
        engine="moto",
        host="127.0.0.1",
        port=1,
        pid=process.pid,
        log_path=Path(os.devnull),
        _process=process,
    )


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def test_an_engine_that_ended_is_never_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()  # reaped: its pid may be anyone's now
    engine = _engine(process)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert not engine.signal(signal.SIGSTOP)
    for target in (engine, engine.pid):  # the engine, or the pid it had
        with pytest.raises(RuntimeError, match="not running"):
            stop_engine(target)
    assert sent == []


def test_stop_and_resume_reach_the_engine_process(sleeper: subprocess.Popen[bytes]) -> None:
    engine = _engine(sleeper)
    stop_engine(engine)
    try:
        assert _reaches(sleeper.pid, stopped=True)
    finally:
        resume_engine(engine)
    assert _reaches(sleeper.pid, stopped=False)
