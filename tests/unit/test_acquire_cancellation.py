"""Cancellation at every await point of the acquire path, on the in-memory bucket IO.

Every operation of the double suspends twice (before it applies, and after it applied but
before its caller hears of it: when an answer is lost), so that every point where a
real request can be cut is a point where the caller can be cancelled. For every k, a fresh acquire
runs k turns of the event loop and is then cancelled, until it completes before the k-th turn:
that enumerates every await point the caller can be cancelled at (cancellation is only ever
delivered where a task is suspended). After the work left off the caller's path has drained,
each item's consumption must be what §5.18 says: the lease's amounts (and its adjustment) if the
block body had completed, else nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from support.acquire_env import NS, AcquireEnv
from support.memory_bucket_io import MemoryBucketIO
from zae_limiter.acquire.acquisition import Acquisition, AcquisitionParts
from zae_limiter.acquire.deadlines import Backoff
from zae_limiter.acquire.pending import Pending
from zae_limiter.acquire.values import PARENT, ResourcePlan
from zae_limiter.core.bucket import MILLI
from zae_limiter.core.evidence import MAX_ENTRIES
from zae_limiter.core.images import BucketImage
from zae_limiter.dynamo import keys
from zae_limiter.dynamo.bucket_attributes import EVIDENCE
from zae_limiter.models import OnUnavailable


def _suspending(name: str) -> Any:
    """The double's operation `name`, suspending before it applies and before it answers."""

    async def operation(self: SuspendingBucketIO, *args: Any, **kwargs: Any) -> Any:
        await self.turn()
        result = await getattr(MemoryBucketIO, name)(self, *args, **kwargs)
        await self.turn()
        return result

    return operation


class SuspendingBucketIO(MemoryBucketIO):
    """The double, with every operation suspending before and after it applies."""

    def __init__(self) -> None:
        super().__init__()
        self.awaits = 0

    async def turn(self) -> None:
        self.awaits += 1
        await asyncio.sleep(0)

    read = _suspending("read")
    update = _suspending("update")
    create = _suspending("create")
    fence = _suspending("fence")
    replace = _suspending("replace")


class Case:
    """One acquire on a fresh double: single resource, or the seed's three-bucket call; `full`:
    every item holds the most evidence entries, all young (core/evidence.py), so the call's
    writes go without evidence and are never sent twice."""

    def __init__(self, shape: str, full: bool = False) -> None:
        self.env = env = AcquireEnv(backoff=Backoff(scale=0.0))
        self.bucket_io = env.bucket_io = SuspendingBucketIO()
        env.admission.waves.bucket_io = self.bucket_io
        env.admission.finder.bucket_io = self.bucket_io
        self.pending = Pending()
        env.admission.pending = self.pending

        def stored(entity: str, resource: str) -> BucketImage:
            image = env.stored(entity, resource)
            if not full:
                return image
            key = keys.bucket(*image.address)
            young = {f"other{i:03d}": env.clock() for i in range(MAX_ENTRIES)}
            self.bucket_io.items[(key["PK"], key["SK"])][EVIDENCE] = young
            found = self.bucket_io.image(key)
            assert found is not None
            return found

        child = stored("user-3", "search")
        plans = [ResourcePlan("search", {"rpm": 2}, env.target(child, {"rpm": 2}), None)]
        if shape == "cascade":
            org = stored("org-acme", "search")
            budget = stored("user-3", "budget")
            parent = replace(env.target(org, {"rpm": 2}), role=PARENT)
            plans = [
                ResourcePlan("search", {"rpm": 2}, plans[0].child, parent),
                ResourcePlan("budget", {"rpm": 3}, env.target(budget, {"rpm": 3}), None),
            ]
        self.items = [
            (t.entity_id, t.resource, t.amounts["rpm"] // MILLI) for p in plans for t in p.targets
        ]

        async def targets(*_: Any) -> list[ResourcePlan]:
            await self.bucket_io.turn()
            return plans

        env.admission.targets = targets  # type: ignore[method-assign,assignment]

        async def no_gates(_: Any) -> None:
            return None

        self.parts = AcquisitionParts(
            env.admission,
            env.clock,
            self.pending,
            "t",
            lambda mode: mode or OnUnavailable.BLOCK,
            no_gates,
        )

    def acquisition(self) -> Acquisition:
        requests = {"search": {"rpm": 2}}
        return Acquisition(self.parts, "user-3", requests, None, None, None)

    def consumed(self, entity: str, resource: str) -> int:
        image = self.bucket_io.image(keys.bucket(NS, entity, resource, 0))
        assert image is not None
        return image.states["rpm"].consumed // MILLI


async def run_cancelled_at(case: Case, k: int, adjust: bool) -> tuple[bool, bool]:
    """Run one acquire, cancel it after k loop turns. Returns (completed, body_done)."""
    progress = {"body": False}

    async def call() -> None:
        async with case.acquisition() as lease:
            if adjust:
                await lease.adjust(rpm=1)
            progress["body"] = True

    task = asyncio.ensure_future(call())
    for _ in range(k):
        if task.done():
            break
        await asyncio.sleep(0)
    completed = task.done()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        assert not completed
    await case.pending.drain(None)
    assert case.pending.abandoned_at_close == 0
    return completed, progress["body"]


@pytest.mark.parametrize("shape", ["single", "cascade"])
@pytest.mark.parametrize("adjust", [False, True])
@pytest.mark.parametrize("full", [False, True], ids=["evidence", "full-item"])
async def test_cancelling_at_every_await_point_leaves_no_mismatch(
    shape: str, adjust: bool, full: bool
) -> None:
    points = 0
    for k in range(10_000):
        case = Case(shape, full)
        completed, body_done = await run_cancelled_at(case, k, adjust)
        for entity, resource, amount in case.items:
            owed = amount + (1 if adjust and resource == "search" else 0) if body_done else 0
            got = case.consumed(entity, resource)
            assert got == owed, f"cancelled after {k} turns: {entity}/{resource} {got} != {owed}"
        if completed:
            break
        points += 1
    else:
        pytest.fail("the acquire never completed")
    assert points >= 4  # reads, the debit, the exit: the enumeration reached past the body
    unkept = case.env.admission.waves.lanes.unkept
    assert (unkept > 0) == full  # on full items every write went without evidence


async def enter_and_leave(acquisition: Acquisition) -> None:
    async with acquisition:
        pass


async def test_cancelling_the_second_of_two_callers_on_one_item_at_every_await_point() -> None:
    """The second caller queues behind the first's write (sent in place), then goes in a batch
    of its own: cancelled at each await point (also once told its outcome, before it resumed),
    it leaves nothing, and the first caller's lease is untouched."""
    points = 0
    for k in range(10_000):
        case = Case("single")
        first_task = asyncio.ensure_future(enter_and_leave(case.acquisition()))
        await asyncio.sleep(0)  # the first call's write is on its way
        completed, body_done = await run_cancelled_at(case, k, adjust=False)
        await first_task  # the first lease ended normally
        got = case.consumed("user-3", "search")
        owed = 2 + (2 if body_done else 0)
        assert got == owed, f"second cancelled after {k} turns: {got} != {owed}"
        if completed:
            break
        points += 1
    else:
        pytest.fail("the second acquire never completed")
    assert points >= 4
