"""The guard of `support/leftover_tasks.py`: a test that leaves a library task pending, on the
session's loop or on another thread's, fails at teardown with the task's coroutine and where it
was made; a test marked `leaves_tasks(reason)` does not; the tasks are cancelled either way."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER = """
import asyncio
import threading

import pytest

from zae_limiter.gathering import gather_or_end

LEFT = []


async def forever(started=None):
    if started is not None:
        started.set()
    await asyncio.Event().wait()


@pytest.fixture(scope="module")
def thread_loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_left_on_another_thread(thread_loop):
    started = threading.Event()
    asyncio.run_coroutine_threadsafe(gather_or_end(forever(started)), thread_loop)
    assert started.wait(30)
    LEFT.append(thread_loop)


async def test_left_on_the_session_loop():
    LEFT.append(asyncio.ensure_future(gather_or_end(forever())))


@pytest.mark.leaves_tasks("a process that dies with its work going on")
async def test_says_why():
    LEFT.append(asyncio.ensure_future(gather_or_end(forever())))


async def test_closes_what_it_opens():
    task = asyncio.ensure_future(gather_or_end(forever()))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_every_task_left_was_cancelled():
    assert LEFT[1].cancelled() and LEFT[2].cancelled()
"""


LEFT_ON_THE_LOOP = "    LEFT.append(asyncio.ensure_future(gather_or_end(forever())))"
#: As the suite runs (pyproject.toml): one loop for the session, so a task can outlive its test.
SESSION_LOOP = (
    "-o",
    "asyncio_mode=auto",
    "-o",
    "asyncio_default_test_loop_scope=session",
    "-o",
    "asyncio_default_fixture_loop_scope=session",
)


def test_the_guard_names_the_tasks_a_test_left(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess(
        "-p", "support.leftover_tasks", "-p", "no:randomly", *SESSION_LOOP
    )
    result.assert_outcomes(passed=5, errors=2)
    text = result.stdout.str()
    for test in ("test_left_on_another_thread", "test_left_on_the_session_loop"):
        assert f"ERROR at teardown of {test}" in text
    assert "ERROR at teardown of test_says_why" not in text
    assert "left 1 library task(s) running" in text
    assert "gather_or_end, waiting at" in text
    made = INNER.strip().splitlines().index(LEFT_ON_THE_LOOP) + 1  # makepyfile strips it
    assert f"test_inner.py:{made} (test_left_on_the_session_loop)" in text
    assert "made by a callback of its loop" in text  # run_coroutine_threadsafe's
