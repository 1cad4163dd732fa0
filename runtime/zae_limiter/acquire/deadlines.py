"""Deadlines: how long a caller waits, and how long a write can still land (docs/on-unavailable.md).

Two different bounds:

- the caller's *deadline* (`acquire(timeout=)`, `Repository.open(acquire_timeout=)`): how long
  an admission or a lease's exit may hold the caller; past it the work goes on off the caller's
  path (`acquire.pending`);
- a write's *resolution bound*: how long after its first send a copy of a write can still
  land. Its constants live in `core.bounds` (pure, for every layer that waits them out);
  `check_request_timeouts` here refuses request timeouts that would break it.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import os
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from ..core.bounds import MAX_REQUEST_TIMEOUT_S
from ..errors import ValidationError

#: The default deadline of an admission and of a lease's exit (seconds).
DEFAULT_ACQUIRE_TIMEOUT = 1.0
ENV_ACQUIRE_TIMEOUT = "ZAEL_ACQUIRE_TIMEOUT"
#: How long `close(timeout=None)` waits for work resolved off callers' paths (seconds): inside
#: the shutdown grace period of common runtimes (Kubernetes and ECS give 30 s).
DEFAULT_CLOSE_TIMEOUT = 8.0
ENV_CLOSE_TIMEOUT = "ZAEL_CLOSE_TIMEOUT"
#: The longest pause between tries of work that waits out an outage (seconds).
MAX_OUTAGE_PAUSE_S = 2.0


@dataclass(frozen=True)
class Backoff:
    """The pause before a write is tried again: `seconds` times `scale` (injected; tests use 0,
    so that retries cost no wall time)."""

    scale: float = 1.0

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds * self.scale)


class Default:
    """ "Not given": `acquire(timeout=)` takes the repository's `acquire_timeout`, which takes
    `$ZAEL_ACQUIRE_TIMEOUT`, else 1.0 s."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = Default()


def timeout_value(value: Any, field: str) -> float | None:
    """A deadline in seconds (finite, above 0), or None for "as long as resolving takes"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(field, value, "must be a number of seconds, e.g. 0.5, or None")
    if not math.isfinite(value) or value <= 0:
        raise ValidationError(field, value, "must be a finite number of seconds above 0, or None")
    return float(value)


def acquire_timeout(value: float | Default | None) -> float | None:
    """`Repository.open(acquire_timeout=)`, else `$ZAEL_ACQUIRE_TIMEOUT`, else 1.0."""
    if not isinstance(value, Default):
        return timeout_value(value, "acquire_timeout")
    return _from_env(ENV_ACQUIRE_TIMEOUT, DEFAULT_ACQUIRE_TIMEOUT, allow_none=True)


def close_timeout(value: float | None) -> float:
    """`close(timeout=)`, else `$ZAEL_CLOSE_TIMEOUT`, else 8.0 (always a bound: a process that
    is shutting down must end)."""
    if value is not None:
        bound = timeout_value(value, "timeout")
        assert bound is not None
        return bound
    bound = _from_env(ENV_CLOSE_TIMEOUT, DEFAULT_CLOSE_TIMEOUT, allow_none=False)
    assert bound is not None
    return bound


def _from_env(name: str, default: float, *, allow_none: bool) -> float | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if allow_none and raw.lower() == "none":
        return None
    try:
        number = float(raw)
    except ValueError:
        example = "e.g. 0.5, or 'none'" if allow_none else "e.g. 8"
        raise ValidationError(name, raw, f"must be a number of seconds, {example}") from None
    return timeout_value(number, name)


def outage_pause(tries: int) -> float:
    """The pause (seconds) before the `tries`-th try of work that waits out an outage: doubling
    from 50 ms up to `MAX_OUTAGE_PAUSE_S`, so a table that comes back is noticed within it."""
    return min(MAX_OUTAGE_PAUSE_S, 0.05 * float(2 ** min(tries, 8)))


def check_request_timeouts(connect: float, read: float) -> None:
    """Refuse request timeouts (seconds, as the client will use them) that could let a write
    land after the exactly-once rules stop watching."""
    if connect + read > MAX_REQUEST_TIMEOUT_S:
        raise ValidationError(
            "client_config",
            f"connect_timeout={connect:g}, read_timeout={read:g}",
            f"connect_timeout + read_timeout must be at most {MAX_REQUEST_TIMEOUT_S:g} s: a "
            "write re-sent after a lost answer must not land after the exactly-once rules stop "
            "watching for it; bound the caller with acquire_timeout instead",
        )


class Deadline:
    """One caller's deadline (see `Deadlines`)."""

    __slots__ = ("cancelling", "done", "expired", "task", "when")

    def __init__(self, when: float, task: asyncio.Task[Any]) -> None:
        self.when = when
        self.task = task
        self.cancelling = task.cancelling()
        self.expired = False
        self.done = False


class Deadlines:
    """Deadlines of callers whose work runs in their own task, on one timer for all of them.

    At its deadline a caller's task is cancelled, as `asyncio.timeout` does it; unlike it, no
    timer is scheduled per caller (each one costs a handle in the loop's heap, which keeps
    cancelled handles: most of what a warm acquire spent on its deadline). Callers mostly share
    one timeout, so their deadlines arrive in order and a deque holds them.
    """

    def __init__(self) -> None:
        self._entries: deque[Deadline] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def enter(self, timeout: float) -> Deadline:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None, "a deadline needs a task"
        entry = Deadline(loop.time() + timeout, task)
        entries = self._entries
        if entries and entries[-1].when > entry.when:
            bisect.insort(entries, entry, key=_when)  # a shorter timeout than the last caller's
        else:
            entries.append(entry)
        timer = self._timer
        if timer is None or entry.when < timer.when():  # none armed, or armed for later
            if timer is not None:
                timer.cancel()
            self._timer = loop.call_at(entry.when, self._fire)
        return entry

    def leave(self, entry: Deadline) -> bool:
        """Done with `entry`; True when its deadline cancelled the task and nothing else did
        (the caller then reports the deadline instead of the cancellation)."""
        entry.done = True
        entries = self._entries
        while entries and entries[0].done:
            entries.popleft()
        return entry.expired and entry.task.uncancel() <= entry.cancelling

    def _fire(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        entries = self._entries
        while entries and (entries[0].done or entries[0].when <= now):
            entry = entries.popleft()
            if not entry.done:
                entry.expired = entry.done = True
                entry.task.cancel()
        self._timer = loop.call_at(entries[0].when, self._fire) if entries else None


def _when(entry: Deadline) -> float:
    return entry.when
