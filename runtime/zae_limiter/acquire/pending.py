"""Work a caller stopped waiting for: admissions and exits resolved off the caller's path.

A single-item admission (the warm path) runs in the caller's task: the lanes make its one write
safe to cancel (`lanes.Lanes.write`), and the write a caller leaves in flight is adopted here
through `Lanes.on_leave`. Work of several writes (a cascade or several resources, a
`consume()`, a lease's exit) runs as a task that is never cancelled by its caller; the caller
waits for it until its deadline (`bounded`). When the caller stops waiting (the deadline passed,
or it was cancelled) the work is *adopted*: it goes on, under the lanes' exactly-once rules, and
what it debited for a caller that is no longer there is refunded exactly once when it ends (its
`compensate`, or the lanes' orphan refund). An exit write simply lands.

Adopted work is bounded in memory: at `MAX_PENDING` adopted tasks, `full` is true and new
admissions apply `on_unavailable` at once without sending anything. Nothing adopted is given up
while the process lives (the lanes wait out outages); `drain()` (from `Repository.close`) waits
for it within close's bound, then the lanes log what is left, one line per item
(`leftovers`), and `abandon()` ends the rest. See docs/on-unavailable.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .deadlines import Deadlines
from .refund_log import RefundLog

log = logging.getLogger("zae_limiter")
_T = TypeVar("_T")

#: Adopted tasks at most; past it new admissions are refused (or degraded) without I/O.
MAX_PENDING = 10_000


class DeadlinePassed(Exception):
    """The caller's deadline passed before the work was decided (it goes on off the path)."""


async def _handing(work: Coroutine[Any, Any, _T], out: asyncio.Future[_T]) -> _T:
    """Run `work` and hand its outcome to `out` (the caller's wait) in the same loop turn."""
    try:
        result = await work
    except asyncio.CancelledError:
        if not out.done():
            out.cancel()
        raise
    except BaseException as exc:
        if not out.done():
            out.set_exception(exc)
        raise
    if not out.done():
        out.set_result(result)
    return result


def _expire(out: asyncio.Future[Any]) -> None:
    if not out.done():
        out.set_exception(DeadlinePassed())


def _retrieved(task: asyncio.Future[Any]) -> None:
    """The caller got the task's exception through its own wait: mark it seen."""
    if not task.cancelled():
        task.exception()


class Pending:
    """One opened repository's adopted work and its counters."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self._tasks: set[asyncio.Task[None]] = set()
        self._adopted: set[asyncio.Future[Any]] = set()  # what `_tasks` follow (adopted once)
        self.resolved_after_deadline = 0  # adopted work that ended (landed, refused or failed)
        self.refunded_after_deadline = 0  # item refunds landed for callers that had left
        self.abandoned_at_close = 0  # items left unresolved when close() gave up (lines logged)
        self.deadlines = Deadlines()  # of admissions running in their callers' tasks
        self.refund_log = RefundLog()  # refunds for callers that had left, per interval
        self.closed = False

    def counters(self) -> tuple[int, int, int, int]:
        """(pending, resolved after a deadline, refunded after a deadline, abandoned at close),
        which every request hook event carries."""
        return (
            len(self._tasks),
            self.resolved_after_deadline,
            self.refunded_after_deadline,
            self.abandoned_at_close,
        )

    @property
    def count(self) -> int:
        """Adopted work still being resolved."""
        return len(self._tasks)

    @property
    def full(self) -> bool:
        return len(self._tasks) >= self.limit

    async def bounded(
        self,
        work: Coroutine[Any, Any, _T],
        timeout: float | None,
        compensate: Callable[[_T], Awaitable[None]] | None,
    ) -> _T:
        """`work`'s result, waiting at most `timeout` seconds (None: until it ends).

        Raises DeadlinePassed when the deadline passes first; CancelledError, unchanged, when
        the caller is cancelled. Either way the work goes on and, if it succeeds,
        `compensate(result)` undoes it for the caller that left.
        """
        # A task, started at once: code that binds to its task (asyncio.timeout, aiohttp's
        # timers) must run all of `work` in one task, so it cannot start in the caller's.
        loop = asyncio.get_running_loop()
        out: asyncio.Future[_T] = loop.create_future()
        task = loop.create_task(_handing(work, out))
        timer = None if timeout is None else loop.call_later(timeout, _expire, out)
        try:
            return await out
        except (DeadlinePassed, asyncio.CancelledError):
            self.adopt(task, compensate)  # the deadline passed, or the caller was cancelled
            raise
        except BaseException:
            task.add_done_callback(_retrieved)
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def adopt(
        self,
        task: asyncio.Future[_T],
        compensate: Callable[[_T], Awaitable[None]] | None,
        *,
        counted: bool = True,
    ) -> None:
        """Resolve `task` off the caller's path (also when it has already ended); once.
        `counted`: it counts in `resolved_after_deadline` (a refund the lanes start for a write
        that landed after its caller left is part of that write's resolution: not counted)."""
        if task in self._adopted:
            return
        self._adopted.add(task)
        task.add_done_callback(self._adopted.discard)
        follow = asyncio.ensure_future(self._follow(task, compensate, counted))
        self._tasks.add(follow)
        follow.add_done_callback(self._tasks.discard)
        if len(self._tasks) in (self.limit // 10, self.limit // 2, self.limit):
            log.warning(
                "%d acquire outcomes are being resolved off callers' paths (limit %d)",
                len(self._tasks),
                self.limit,
            )

    async def _follow(
        self,
        task: asyncio.Future[_T],
        compensate: Callable[[_T], Awaitable[None]] | None,
        counted: bool,
    ) -> None:
        try:
            result = await task
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the work's own rules refunded what it had landed
            self.resolved_after_deadline += counted
            log.debug("work resolved after its caller left: %r", exc)
            return
        self.resolved_after_deadline += counted
        if compensate is not None:
            try:
                await compensate(result)
            except Exception as exc:  # undecided, or close() gave up (its line says what)
                log.warning("a refund for a caller that had left is not known to land: %s", exc)

    async def drain(self, timeout: float | None) -> bool:
        """Wait for adopted work at most `timeout` seconds (None: until it ends); True when all
        of it resolved."""
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while self._tasks:
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    async def abandon(self, turns: int = 20) -> int:
        """After `drain` gave up and the lanes closed: let the work that now ends at once (every
        write fails, what it left is logged) run for a few loop turns, then cancel the rest.
        Returns how many tasks were cancelled."""
        for _ in range(turns):
            if not self._tasks:
                break
            await asyncio.sleep(0)
        left = list(self._tasks)
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
        self.closed = True
        return len(left)
