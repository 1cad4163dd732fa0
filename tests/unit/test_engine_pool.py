"""The test fixtures' engine pool (tests/support/engine_pool.py): each module gets a fresh engine,
the next one is started ahead, and every engine is started and stopped on one long-lived thread
(DynamoDB Local's parent-death signal follows the thread that started it)."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from support.engine_pool import EnginePool
from zae_limiter.local import RunningEngine


class Started:
    """Stands in for a RunningEngine: records the thread it was started and stopped on."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.started_on = threading.get_ident()
        self.stopped_on: int | None = None

    def stop(self) -> None:
        assert self.stopped_on is None, "stopped twice"
        self.stopped_on = threading.get_ident()


def test_each_take_is_a_fresh_engine_and_the_next_is_started_ahead() -> None:
    started: list[Started] = []

    def start() -> RunningEngine:
        started.append(Started(len(started)))
        return cast(RunningEngine, started[-1])

    pool = EnginePool(start)
    first = cast(Any, pool.take())
    second = cast(Any, pool.take())
    assert (first.number, second.number) == (0, 1)
    pool.give_back(first)
    pool.give_back(second)
    pool.close()
    assert len(started) == 3  # the third was started ahead while the second was in use
    threads = {e.started_on for e in started} | {e.stopped_on for e in started}
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert all(e.stopped_on is not None for e in started)  # the one started ahead too


def test_a_failed_start_ahead_fails_only_the_module_that_takes_it() -> None:
    calls: list[int] = []

    def start() -> RunningEngine:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("no JVM")
        return cast(RunningEngine, Started(len(calls)))

    pool = EnginePool(start)
    pool.give_back(pool.take())
    with pytest.raises(RuntimeError, match="no JVM"):
        pool.take()
    pool.give_back(pool.take())
    pool.close()
    assert len(calls) == 4
