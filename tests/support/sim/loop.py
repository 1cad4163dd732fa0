"""A virtual-time asyncio event loop: time moves only when every task waits, by exactly as much
as the next timer needs; nothing reaches the outside world.

asyncio's own scheduling is deterministic for a program that does no I/O: ready callbacks run
in the order they were scheduled, timers in the order of their due times (ties in the order
they were set). So one program on this loop runs the same way every time, whatever the machine's
load. What is left to make a run replayable is every source of randomness the program reads
(`determinism`): the library's writer and item ids (`secrets`), its retry jitter and shard
choice (the `random` module), and the wall clock (the simulation passes its own clock to
`Repository.open`, and gives the writer's `Load`, on `time.monotonic` by default, the loop's
time: `World.open`).

Why not a library: async-solipsism (0.10, 2026) is the closest fit (a loop with a fake
selector and clock, sockets in memory), but it is GPL-3.0 and what this needs of it is its
twenty lines of selector and clock; looptime (0.9) and aiotools' VirtualClock patch the time of
a loop that still polls real selectors (a syscall a turn) and let real I/O in, which a
simulation must not; trio's MockClock is not asyncio. docs/contributing.md says so too.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import random
import secrets
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

_T = TypeVar("_T")
RESOLUTION_S = 1e-6
#: The cyclic collector's thresholds while a simulation runs: a run allocates millions of short
#: lived objects (requests, answers, futures) and the default (700) starts a collection every few
#: hundred; every 20,000 took 8 % less CPU for the CI seeds (docs/contributing.md), for ~40 MB.
GC_THRESHOLD = (20_000, 50, 100)


#: Memory a simulation may add to its process before it is stopped as a runaway (bytes), and
#: how many loop turns apart it is looked at. A run takes about 100 MB; one that grows past
#: this (a livelock that keeps making work in virtual time) would otherwise take the machine.
RUNAWAY_BYTES = 2 << 30
RUNAWAY_EVERY = 5_000


class Deadlock(Exception):
    """Every task waits and no timer is set: the simulated program can never go on."""


class Runaway(Exception):
    """The simulated program keeps growing in memory: stopped before the machine runs out."""


def _resident_bytes() -> int:
    """This process's resident memory (Linux `/proc`; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Selector:
    """No file descriptors: a select with a timeout moves the clock to the next timer."""

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def select(self, timeout: float | None) -> list[Any]:
        if timeout is None:
            raise Deadlock("every task waits and no timer is set")
        if timeout > 0:
            self.loop.now += timeout
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """See the module docstring. `now` is the loop's time in seconds, from 0."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self._selector = _Selector(self)
        self._clock_resolution = RESOLUTION_S
        self.turns = 0
        self.runaway_bytes = RUNAWAY_BYTES
        self.runaway_every = RUNAWAY_EVERY
        self._resident_at_start = _resident_bytes()

    def time(self) -> float:
        return self.now

    def _process_events(self, event_list: list[Any]) -> None:
        self.turns += 1
        if self.turns % self.runaway_every == 0 and self._resident_at_start:
            grown = _resident_bytes() - self._resident_at_start
            if grown > self.runaway_bytes:
                raise Runaway(f"memory grew by {grown >> 20} MB by {self.now:.1f} s simulated")

    def _write_to_self(self) -> None:
        pass  # call_soon_threadsafe: nothing waits in a selector here


def run(main: Coroutine[Any, Any, _T]) -> tuple[_T, list[str]]:
    """Run `main` on a new `SimLoop` to its end; returns its result and what reached the loop's
    exception handler meanwhile (an exception no task retrieved, one raised in a callback: a
    bug, whatever the history says). Tasks still pending at the end (a killed process's, which
    wait for answers that never come) are then cancelled and unwound (`_wind_down`)."""
    loop = SimLoop()
    errors: list[str] = []
    saved = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)

    def handler(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message"))
        if message.startswith("Task was destroyed but it is pending"):
            return  # a killed process's task, waiting for what never comes, was collected
        errors.append(f"{message}: {context.get('exception')!r}")

    loop.set_exception_handler(handler)
    try:
        result = loop.run_until_complete(main)
    finally:
        loop.set_exception_handler(lambda _, context: None)
        _wind_down(loop)
        loop.close()
        gc.set_threshold(*saved)
    return result, errors


def _wind_down(loop: SimLoop) -> None:
    """Cancel what is still pending (a killed process's tasks) and let it unwind for a while
    of virtual time, so that nothing runs once the loop is gone."""
    loop.runaway_bytes = 1 << 62  # (unwinding a runaway is not stopped again)
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    with suppress(Deadlock):
        loop.run_until_complete(asyncio.sleep(3600))
    for task in asyncio.all_tasks(loop):
        task.get_coro().close()


@contextmanager
def determinism(seed: int) -> Iterator[random.Random]:
    """Every random draw the library makes comes from `seed` inside this block: `secrets`'
    ids and the `random` module's draws (both restored after). Yields a generator for the
    simulation's own draws."""
    drawn = random.Random(f"library/{seed}")
    saved_state = random.getstate()
    saved = {name: getattr(secrets, name) for name in ("token_urlsafe", "token_hex", "randbits")}

    def token_bytes(n: int | None) -> bytes:
        return drawn.getrandbits(8 * (n or 32)).to_bytes(n or 32, "big")

    def token_urlsafe(nbytes: int | None = None) -> str:
        return base64.urlsafe_b64encode(token_bytes(nbytes)).rstrip(b"=").decode("ascii")

    def token_hex(nbytes: int | None = None) -> str:
        return token_bytes(nbytes).hex()

    def randbits(k: int) -> int:
        return drawn.getrandbits(k)

    random.seed(f"random/{seed}")
    secrets.token_urlsafe = token_urlsafe
    secrets.token_hex = token_hex
    secrets.randbits = randbits
    try:
        yield random.Random(f"simulation/{seed}")
    finally:
        for name, function in saved.items():
            setattr(secrets, name, function)
        random.setstate(saved_state)
