"""No test leaves a library task running: one would send requests during the tests after it
(the session's wire recorder counted a shared read still retrying, renewals, lane writes and a
pending exit of earlier tests in later tests' blocks).

Each task made on any event loop (`BaseEventLoop.create_task` is wrapped for the session, so
the session's pytest-asyncio loop, `asyncio.run`'s and the sync facade's thread are all seen)
whose coroutine is the library's is noted with the test that was running and where it was made.
After a test's teardown (its fixtures' finalizers have run on the loop; nothing waits longer), a
task noted during it that is not done, on a loop not closed, fails it ("ERROR at teardown"),
with the coroutine, where it waits and where it was made; the tasks are then cancelled so they
reach no later test. A test that leaves a task on purpose (a process that "dies" with work
still going) says so with `@pytest.mark.leaves_tasks(reason)`: its tasks are cancelled, not
reported. A task on a loop already closed never runs again and is not counted.

Why after teardown: pytest-asyncio runs every test and fixture on one session-scoped loop per
worker (pyproject.toml), so a task a test left runs on in the next tests' loop turns; loops
that `asyncio.run` and the CLI's runner make are closed (their tasks cancelled) when they
return, and the sync facade's loop thread lives as long as the process.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import weakref
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

import zae_limiter

MARKER = "leaves_tasks"
#: How long a leftover task, once cancelled, is given to end (the failure path only).
REAP_SECONDS = 5.0

_LIBRARY = str(Path(zae_limiter.__file__).parent) + os.sep
_ASYNCIO = str(Path(asyncio.__file__).parent) + os.sep
_ROOT = str(Path(__file__).parents[2]) + os.sep
_LOOP_CALLBACK = asyncio.events.Handle._run.__code__


@dataclass(frozen=True)
class Origin:
    """Where a library task was made: the line that made it, the first caller outside the
    library (the test's line, when the test made it), and, when it was made inside another
    library task, that task's origin."""

    test: str | None
    made: tuple[CodeType, int] | None
    caller: tuple[CodeType, int] | None
    parent: Origin | None

    def describe(self) -> str:
        text = (
            "made by a callback of its loop"
            if self.made is None
            else f"made at {_place(self.made)}"
        )
        if self.caller is not None:
            text += f", called from {_place(self.caller)}"
        if self.parent is not None:
            text += f"; inside a task {self.parent.describe()}"
        return text


def _place(site: tuple[CodeType, int] | None) -> str:
    if site is None:
        return "?"
    code, line = site
    return f"{code.co_filename.removeprefix(_ROOT)}:{line} ({code.co_qualname})"


def _origin(frame: FrameType | None, test: str | None, parent: Origin | None) -> Origin:
    made = caller = None
    while frame is not None:
        code = frame.f_code
        if code is _LOOP_CALLBACK:
            break  # made by a callback the loop ran (`run_coroutine_threadsafe`'s)
        if code.co_filename.startswith(_ASYNCIO):
            if made is not None:
                break  # a task's step or a callback: what is above is the loop's
        else:
            if made is None:
                made = (code, frame.f_lineno)
                if not code.co_filename.startswith(_LIBRARY):
                    break  # the test (or a tool) made it itself
            elif not code.co_filename.startswith(_LIBRARY):
                caller = (code, frame.f_lineno)
                break
        frame = frame.f_back
    return Origin(test, made, caller, parent)


class TaskGuard:
    """The library's tasks, noted as they are made, and the ones a test left."""

    def __init__(self) -> None:
        self.test: str | None = None
        self._made: weakref.WeakKeyDictionary[asyncio.Task[Any], Origin] = (
            weakref.WeakKeyDictionary()
        )
        self._original: Any = None
        self._installed = 0  # a test of this guard runs a session inside the session
        self._lock = threading.Lock()  # tasks are also made on the sync facade's thread

    def install(self) -> None:
        self._installed += 1
        if self._original is not None:
            return
        original = self._original = asyncio.BaseEventLoop.create_task
        guard = self

        def create_task(loop: Any, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
            task = original(loop, coro, **kwargs)
            code = getattr(coro, "cr_code", None)
            if code is not None and code.co_filename.startswith(_LIBRARY):
                guard.note(task, loop)
            return task

        asyncio.BaseEventLoop.create_task = create_task  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        self._installed -= 1
        if self._installed == 0 and self._original is not None:
            asyncio.BaseEventLoop.create_task = self._original  # type: ignore[method-assign]
            self._original = None

    def note(self, task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop) -> None:
        try:
            parent = asyncio.current_task(loop)
        except RuntimeError:
            parent = None
        with self._lock:
            above = self._made.get(parent) if parent is not None else None
            self._made[task] = _origin(sys._getframe(2), self.test, above)

    def left_by(self, test: str) -> list[tuple[asyncio.Task[Any], Origin]]:
        """The tasks made during `test` still pending on a loop that can run them."""
        with self._lock:
            made = list(self._made.items())
        return [
            (task, origin)
            for task, origin in made
            if origin.test == test and not task.done() and not task.get_loop().is_closed()
        ]


def describe(task: asyncio.Task[Any], origin: Origin) -> str:
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", repr(coro))
    cancelling = " (cancel requested)" if task.cancelling() else ""
    return f"  {name}{cancelling}, waiting at {_waiting_at(coro)}; {origin.describe()}"


def _waiting_at(coro: Any) -> str:
    """The innermost frame outside asyncio of the coroutine chain the task is suspended in."""
    frame = None
    while coro is not None:
        inner = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if inner is not None and not inner.f_code.co_filename.startswith(_ASYNCIO):
            frame = inner
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    if frame is None:
        return "?"
    return _place((frame.f_code, frame.f_lineno))


def reap(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel the tasks; those on a loop not running (the session's, between tests) are given
    up to REAP_SECONDS to end, so none sends a request in a later test."""
    idle: dict[asyncio.AbstractEventLoop, list[asyncio.Task[Any]]] = {}
    for task in tasks:
        loop = task.get_loop()
        if loop.is_running():
            loop.call_soon_threadsafe(task.cancel)
        else:
            task.cancel()
            idle.setdefault(loop, []).append(task)
    for loop, ended in idle.items():
        loop.run_until_complete(asyncio.wait(ended, timeout=REAP_SECONDS))


_GUARD = TaskGuard()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(reason): the test leaves library tasks running on purpose; they are "
        "cancelled after it, not reported",
    )
    _GUARD.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    _GUARD.uninstall()


_OUTER = pytest.StashKey[str | None]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_OUTER] = _GUARD.test  # a test of this guard runs a session inside a test
    _GUARD.test = item.nodeid
    return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        result = yield
    except BaseException:
        _check(item, report=False)
        raise
    _check(item, report=True)
    return result


def _check(item: pytest.Item, report: bool) -> None:
    _GUARD.test = item.stash.get(_OUTER, None)
    left = _GUARD.left_by(item.nodeid)
    if not left:
        return
    lines = sorted(describe(task, origin) for task, origin in left)
    reap([task for task, _ in left])
    marker = item.get_closest_marker(MARKER)
    if marker is not None and not (marker.args or marker.kwargs.get("reason")):
        pytest.fail(f"@pytest.mark.{MARKER} needs a reason", pytrace=False)
    if marker is not None or not report:
        return
    pytest.fail(
        f"the test left {len(left)} library task(s) running (each would go on sending "
        "requests during later tests; close what the test opened, or mark the test "
        f"@pytest.mark.{MARKER}(reason)):\n" + "\n".join(lines),
        pytrace=False,
    )
