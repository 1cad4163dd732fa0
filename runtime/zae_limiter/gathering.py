"""`gather_or_end`: awaitables run together, none left running once the call is over.

`asyncio.gather` raises the first failure and leaves the other awaitables running: a read that
failed beside one still retrying left the retrying one going on after the public call returned,
and after `close()`, sending requests nobody waits for. Every `asyncio.gather` of the package
without `return_exceptions=True` goes through here (`tests/unit/test_gathering.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar, overload

_T = TypeVar("_T")
_T1 = TypeVar("_T1")
_T2 = TypeVar("_T2")
_T3 = TypeVar("_T3")


@overload
async def gather_or_end(a1: Awaitable[_T1], a2: Awaitable[_T2], /) -> tuple[_T1, _T2]: ...


@overload
async def gather_or_end(
    a1: Awaitable[_T1], a2: Awaitable[_T2], a3: Awaitable[_T3], /
) -> tuple[_T1, _T2, _T3]: ...


@overload
async def gather_or_end(*awaitables: Awaitable[_T]) -> tuple[_T, ...]: ...


async def gather_or_end(*awaitables: Awaitable[Any]) -> tuple[Any, ...]:
    """The results in order, as `asyncio.gather`; on the first failure, or when the caller is
    cancelled, the others are cancelled and waited for before it raises."""
    tasks = [asyncio.ensure_future(aw) for aw in awaitables]
    try:
        return tuple(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        raise
