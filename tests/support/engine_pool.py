"""DynamoDB Local engines for the test modules, each started while the module before it runs.

Every test module gets a fresh engine (fixtures.ENGINE_SCOPE says why). Starting one takes 2-4 s
of wall time, mostly spent waiting for the JVM to answer; the pool hides that wait by starting
the next module's engine as soon as the current one is handed out, and stops used engines off
the test's path. An engine is never shared: each is handed out once, then stopped.

Starts and stops run on one long-lived thread: DynamoDB Local is started with a parent-death
signal (`die_with_parent`), which Linux sends when the *thread* that started the process exits,
so that thread must live as long as the engines it started (the whole session).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from zae_limiter.local import RunningEngine, start_engine


def _start() -> RunningEngine:
    return start_engine(engine="dynamodb-local")


class EnginePool:
    """Hands out fresh DynamoDB Local engines, one started ahead."""

    def __init__(self, start: Callable[[], RunningEngine] = _start) -> None:
        self._start = start
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-pool")
        self._ahead: Future[RunningEngine] | None = None

    def take(self) -> RunningEngine:
        """A fresh engine (the one started ahead, if any); the next one starts now."""
        current = self._ahead if self._ahead is not None else self._thread.submit(self._start)
        self._ahead = self._thread.submit(self._start)
        return current.result()

    def give_back(self, engine: RunningEngine) -> None:
        """Stop a used engine, without waiting for it to exit."""
        self._thread.submit(engine.stop)

    def close(self) -> None:
        """Stop the engine started ahead and every engine given back, and wait for them."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self._thread.submit(_stop_started, ahead)  # after its start, on the one thread
        self._thread.shutdown(wait=True)


def _stop_started(started: Future[RunningEngine]) -> None:
    if started.exception() is None:
        started.result().stop()
