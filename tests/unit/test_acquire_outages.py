"""Work off callers' paths through outages of any length, on the in-memory bucket IO
(docs/on-unavailable.md, "Outages of minutes").

The clock moves only when the lanes pause (`ClockBackoff`: each pause advances the fake clock by
the time it asks for), so an outage of N minutes is N minutes of the writer's clock and a few
milliseconds of the test. Before this, a write whose re-sends kept losing their answers was
given up as undecided, and a refund or exit write was given up after 8 rounds: these tests fail
on that code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from support.acquire_env import AcquireEnv
from support.clock import FakeClock
from support.memory_bucket_io import Fault
from zae_limiter.acquire.deadlines import MAX_OUTAGE_PAUSE_S, Backoff, outage_pause
from zae_limiter.acquire.lanes import PRUNE_AGE_MS, UNKNOWN_RESENDS
from zae_limiter.acquire.values import AnswerLost
from zae_limiter.core.bucket import MILLI, Kind, Params
from zae_limiter.dynamo import bucket_attributes as attrs

BIG = Params("rpm", Kind.RATE, 1_000 * MILLI, 1_000 * MILLI, 60_000)


@dataclass(frozen=True)
class ClockBackoff(Backoff):
    """Sleeps nothing; moves the writer's fake clock by each pause instead."""

    clock: FakeClock = field(default_factory=FakeClock)

    async def pause(self, seconds: float) -> None:
        self.clock.advance(seconds=seconds)


def outage_env() -> AcquireEnv:
    env = AcquireEnv(limits=(BIG,))
    backoff = ClockBackoff(clock=env.clock)
    env.admission.backoff = backoff
    env.admission.waves.lanes.backoff = backoff
    return env


def lose_every_send(env: AcquireEnv, *, landed: bool) -> None:
    """The first send lands (or not), and every re-send loses its answer without applying."""
    env.bucket_io.inject(Fault.LOST_RESPONSE if landed else Fault.TIMEOUT)
    for _ in range(UNKNOWN_RESENDS):
        env.bucket_io.inject(Fault.TIMEOUT)


def table_down_for_reads(env: AcquireEnv, reads: int) -> None:
    for _ in range(reads):
        env.bucket_io.inject(Fault.OUTAGE, operation="read")


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
async def test_a_lost_answer_is_decided_when_the_table_answers_again_whatever_the_outage(
    landed: bool,
) -> None:
    env = outage_env()
    [warm] = await env.admission.debit([env.target(env.stored(), {"rpm": 1})], local_ok=True)
    lose_every_send(env, landed=landed)  # (the item holds this writer's entry from `warm`)
    table_down_for_reads(env, 200)  # 200 reads at up to 2 s apart: over 6 minutes down
    start = env.clock()
    with pytest.raises(AnswerLost):  # the caller is told once re-sending kept failing
        await env.admission.debit([warm.target], local_ok=False)
    await env.admission.pending.drain(None)  # decided off its path: refunded if it landed
    assert env.clock() - start > 6 * 60_000
    lanes = env.admission.waves.lanes
    assert (lanes.undecided, lanes.resolved_by_read) == (0, 1)
    assert env.state().consumed == 1 * MILLI
    assert env.admission.pending.refunded_after_deadline == (1 if landed else 0)
    fences = [c for c in env.bucket_io.calls if c.operation == "fence"]
    assert len(fences) == (0 if landed else 1)  # a late copy of an unlanded write is fenced


async def test_the_pause_between_tries_doubles_up_to_its_cap() -> None:
    pauses = [outage_pause(tries) for tries in range(1, 12)]
    assert pauses[0] == 0.1 and pauses == sorted(pauses)
    assert max(pauses) == MAX_OUTAGE_PAUSE_S  # a table that returns is seen within the cap


async def test_a_refund_and_an_exit_write_wait_out_an_outage_of_any_length() -> None:
    env = outage_env()
    image = env.stored()
    [first] = await env.admission.debit([env.target(image, {"rpm": 5})], local_ok=True)
    [second] = await env.admission.debit([env.target(image, {"rpm": 7})], local_ok=True)
    for _ in range(300):  # certainly not applied, 300 times: minutes of the writer's clock
        env.bucket_io.inject(Fault.OUTAGE)
    start = env.clock()
    await env.admission.refund_for_departed([first])
    await env.admission.apply_adjustments([(second, {"rpm": -2 * MILLI})])
    assert env.clock() - start > 5 * 60_000
    assert env.state().consumed == 5 * MILLI  # 12 debited, 5 refunded, 2 given back
    assert env.admission.pending.refunded_after_deadline == 1


async def test_a_missing_entry_is_decided_exactly_after_an_outage_of_any_length() -> None:
    """This writer never wrote the item before, and the outage outlasts the age at which other
    writers remove entries (PRUNE_AGE_MS): no entry, under a floor below the write, still tells
    that it did not land (a removal would have raised the floor), so it is fenced and decided."""
    env = outage_env()
    image = env.stored()
    lose_every_send(env, landed=False)
    table_down_for_reads(env, 2 * PRUNE_AGE_MS // int(MAX_OUTAGE_PAUSE_S * 1000))
    start = env.clock()
    with pytest.raises(AnswerLost):
        await env.admission.debit([env.target(image, {"rpm": 3})], local_ok=False)
    await env.admission.pending.drain(None)
    assert env.clock() - start > PRUNE_AGE_MS
    lanes = env.admission.waves.lanes
    assert (lanes.undecided, lanes.resolved_by_read) == (0, 1)
    assert len([c for c in env.bucket_io.calls if c.operation == "fence"]) == 1
    assert env.state().consumed == 0


async def test_an_entry_other_writers_removed_during_the_outage_stays_undecided() -> None:
    """The one case a read cannot decide: the write landed, and during the outage other writers
    removed its entry (by age), raising the item's floor to it. It may have landed, and no copy
    of it can land any more: settled toward rejecting (the call is not admitted; the debit that
    landed stays) and counted, never re-applied, never fenced."""
    env = outage_env()
    image = env.stored()
    lose_every_send(env, landed=True)
    table_down_for_reads(env, 10)
    io, writer = env.bucket_io, env.admission.waves.lanes.writer
    read = io.read

    async def read_after_removal(addresses: Any) -> Any:
        for item in io.items.values():  # what another writer's write does to an old entry
            removed = item.get(attrs.EVIDENCE, {}).pop(writer, None)
            if removed is not None:
                item[attrs.FLOOR] = max(item.get(attrs.FLOOR, 0), removed)
        return await read(addresses)

    io.read = read_after_removal  # type: ignore[method-assign]
    with pytest.raises(AnswerLost):
        await env.admission.debit([env.target(image, {"rpm": 3})], local_ok=False)
    await env.admission.pending.drain(None)
    lanes = env.admission.waves.lanes
    assert (lanes.undecided, lanes.resolved_by_read) == (1, 0)
    assert [c for c in io.calls if c.operation == "fence"] == []
    assert env.state().consumed == 3 * MILLI
