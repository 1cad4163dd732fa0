"""`gather_or_end`: no awaitable left running once the call is over (a read still retrying
beside one that failed went on after the public call raised, and after `close()`)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
from pathlib import Path
from typing import Any, cast

import pytest

import zae_limiter
from support.clock import FakeClock
from zae_limiter import config as cfg
from zae_limiter import gathering
from zae_limiter.caches import ConfigCache
from zae_limiter.gathering import gather_or_end
from zae_limiter.resolution import ConfigReads, Resolver

RUNTIME = Path(zae_limiter.__file__).parent


class Gone(Exception):
    pass


async def test_a_failure_ends_the_others_before_it_is_raised() -> None:
    started = asyncio.Event()

    async def retrying() -> int:
        started.set()
        await asyncio.Event().wait()
        return 1

    async def failing() -> int:
        await started.wait()
        raise Gone

    other = asyncio.ensure_future(retrying())
    with pytest.raises(Gone):
        await gather_or_end(other, failing())
    assert other.cancelled()  # asyncio.gather leaves it pending


async def test_a_cancelled_caller_ends_them_all_before_it_returns() -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        entered.set()
        await asyncio.Event().wait()

    one, two = asyncio.ensure_future(slow()), asyncio.ensure_future(slow())
    caller = asyncio.ensure_future(gather_or_end(one, two))
    await entered.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert one.done() and two.done()


async def test_results_in_order() -> None:
    async def value(v: int) -> int:
        await asyncio.sleep(0)
        return v

    assert await gather_or_end(*(value(v) for v in (3, 1, 2))) == (3, 1, 2)
    assert await gather_or_end() == ()


async def test_the_resolver_leaves_no_read_behind_when_one_fails() -> None:
    """The case found: a table deleted under an open repository; the system level's read failed
    while the entity's was still retrying, which went on after `close()`."""
    retrying = asyncio.Event()
    reads: list[asyncio.Task[Any]] = []

    class Reads:
        async def entity_config(self, entity_id: str) -> cfg.EntityConfig:
            reads.append(cast(asyncio.Task[Any], asyncio.current_task()))
            retrying.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def resource_level(self, resource: str) -> cfg.Level | None:
            return None

        async def system_level(self) -> cfg.SystemLevel | None:
            await retrying.wait()
            raise Gone

    resolver = Resolver(cast(ConfigReads, Reads()), ConfigCache(60), FakeClock())
    with pytest.raises(Gone):
        await resolver.resolve_many("e1", ["search"])
    assert len(reads) == 1 and reads[0].cancelled()


def _bare_gathers(path: Path) -> list[int]:
    text = path.read_text()
    if "gather" not in text:
        return []
    lines = []
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        target = node.func
        named = isinstance(target.value, ast.Name) and target.value.id == "asyncio"
        if not (named and target.attr == "gather"):
            continue
        if not any(kw.arg == "return_exceptions" for kw in node.keywords):
            lines.append(node.lineno)
    return lines


def test_every_gather_of_the_package_leaves_nothing_running() -> None:
    """`asyncio.gather` without `return_exceptions` leaves the others running when one fails:
    the package uses `gather_or_end` (or waits for every outcome, `return_exceptions=True`)."""
    found = {
        str(path.relative_to(RUNTIME)): lines
        for path in sorted(RUNTIME.rglob("*.py"))
        if path.name != "gathering.py" and (lines := _bare_gathers(path))
    }
    assert found == {}, "use zae_limiter.gathering.gather_or_end"


@pytest.mark.parametrize("ending", ["a failure", "the caller cancelled"])
async def test_one_that_does_not_end_when_cancelled_is_waited_for_at_most_the_bound(
    ending: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its cleanup waits on something that hangs: the call still ends (spec §5.18: every call
    bounded), the task is logged, kept referenced and its end logged, never dropped silently."""
    monkeypatch.setattr(gathering, "END_WITHIN_S", 0.01)
    entered, release = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:  # deaf to cancellation until released
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
        raise asyncio.CancelledError

    async def failing() -> None:
        await entered.wait()
        if ending == "a failure":
            raise Gone
        await asyncio.Event().wait()

    other = asyncio.ensure_future(stubborn())
    caller = asyncio.ensure_future(gather_or_end(other, failing()))
    try:
        await entered.wait()
        if ending == "the caller cancelled":
            caller.cancel()
        done, _ = await asyncio.wait([caller], timeout=10)  # a hang guard: unbounded, never done
        assert caller in done, "the call waited past its bound for a task that does not end"
        assert isinstance(caller.exception(), Gone) if ending == "a failure" else caller.cancelled()
        assert not other.done() and other in gathering._late
        assert any(r.levelname == "ERROR" and "stubborn" in r.message for r in caplog.records)
    finally:
        release.set()
        await asyncio.wait([other, caller])
    assert other.cancelled() and other not in gathering._late
    assert any("ended late (cancelled)" in r.message for r in caplog.records)
