"""The acquire path's write rules on the in-memory bucket IO: guards, retries, lost responses.

No DynamoDB: `support.memory_bucket_io` applies the conditions our layer asks DynamoDB for, and
injects faults for a chosen write. The same behaviours run end to end on DynamoDB Local in
tests/behaviour (test_acquire.py, test_unknown_outcomes.py, test_concurrency.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from support.acquire_env import AcquireEnv
from support.memory_bucket_io import Fault
from zae_limiter.acquire import Admission, Landed, RulesChanged, Unavailable
from zae_limiter.acquire.waves import MAX_ROUNDS
from zae_limiter.caches import ImageCache
from zae_limiter.core.bucket import MILLI
from zae_limiter.core.images import BucketImage
from zae_limiter.errors import RateLimitExceeded


def ops(env: AcquireEnv) -> list[tuple[str, bool]]:
    """Each write, and whether it re-sends the one before (the same writer sequence)."""
    out = []
    previous = None
    for call in env.bucket_io.writes():
        seq = call.evidence.seq if call.evidence else None
        out.append((call.operation, seq is not None and seq == previous))
        previous = seq
    return out


def queue_during_the_first_write(
    env: AcquireEnv, call: Callable[[], Coroutine[Any, Any, list[Landed]]]
) -> list[asyncio.Task[list[Landed]]]:
    """While the first write is out, start `call` (it queues behind it on the lane); the list
    holds its task once started."""
    started: list[asyncio.Task[list[Landed]]] = []
    real_update = env.bucket_io.update

    async def update(*args: Any, **kwargs: Any) -> BucketImage:
        if not started:
            started.append(asyncio.ensure_future(call()))
            for _ in range(3):
                await asyncio.sleep(0)
        image_after: BucketImage = await real_update(*args, **kwargs)
        return image_after

    setattr(env.bucket_io, "update", update)  # noqa: B010 (a method swapped in)
    return started


async def test_a_first_debit_creates_the_item_in_one_write() -> None:
    env = AcquireEnv()
    landed = await env.admission.debit([env.new_target({"rpm": 3})], local_ok=True)
    assert ops(env) == [("create", False)]
    assert env.balance() == 7
    assert env.state().consumed == 3 * MILLI
    assert landed[0].debited == {"rpm": 3 * MILLI}


async def test_a_warm_debit_is_one_update_guarded_by_the_stamp() -> None:
    env = AcquireEnv()
    image = env.stored()
    await env.admission.debit([env.target(image, {"rpm": 2}, read_now=False)], local_ok=True)
    assert ops(env) == [("update", False)]
    assert env.balance() == 8


async def test_a_stale_image_is_replanned_on_the_item_the_failed_condition_returns() -> None:
    """Another process restamped the item (new stamp sequence): our guarded write fails, gets
    the item back, and lands on it in a second write."""
    env = AcquireEnv()
    stale = env.stored()
    newer = await env.admission.restamp(stale, env.stamp())
    assert newer.stamp_seq == stale.stamp_seq + 1
    env.bucket_io.calls.clear()
    await env.admission.debit([env.target(stale, {"rpm": 1}, read_now=False)], local_ok=False)
    assert ops(env) == [("update", False), ("update", False)]
    assert env.state().consumed == 1 * MILLI


async def test_a_stale_image_never_admits_past_the_limit() -> None:
    """Our image says full, the item is drained: the limit's guard refuses on the server, and
    the refusal is decided on the item it returns, with nothing debited."""
    env = AcquireEnv()
    full = env.stored()
    env.stored(states=env.drained())
    with pytest.raises(RateLimitExceeded) as raised:
        await env.admission.debit([env.target(full, {"rpm": 1}, read_now=False)], local_ok=False)
    assert not raised.value.contended  # a real shortfall, judged on the returned item
    assert ops(env) == [("update", False)]
    assert env.balance() == 0
    assert env.state().consumed == 10 * MILLI  # only the other process's debit


async def test_a_lost_response_is_resolved_by_the_writers_evidence_and_debits_once() -> None:
    env = AcquireEnv()
    image = env.stored()
    env.bucket_io.inject(Fault.LOST_RESPONSE)
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    # the resend refuses to apply a second time; the item it returns holds its sequence
    assert ops(env) == [("update", False), ("update", True)]
    assert env.state().consumed == 4 * MILLI
    assert env.balance() == 6
    assert landed[0].debited == {"rpm": 4 * MILLI}


async def test_a_timeout_that_did_not_apply_is_resent_and_applies_once() -> None:
    env = AcquireEnv()
    image = env.stored()
    env.bucket_io.inject(Fault.TIMEOUT)
    await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    assert ops(env) == [("update", False), ("update", True)]
    assert env.state().consumed == 4 * MILLI


async def test_a_lost_response_on_a_first_write_is_resolved_too() -> None:
    env = AcquireEnv()
    env.bucket_io.inject(Fault.LOST_RESPONSE)
    await env.admission.debit([env.new_target({"rpm": 2})], local_ok=True)
    # the resend is the same create: it fails (the item is there) and holds its sequence
    assert ops(env) == [("create", False), ("create", True)]
    assert env.state().consumed == 2 * MILLI


async def test_an_item_deleted_since_it_was_seen_is_created_again() -> None:
    env = AcquireEnv()
    image = env.stored()
    env.bucket_io.items.clear()  # expired and deleted by DynamoDB
    await env.admission.debit([env.target(image, {"rpm": 1}, read_now=False)], local_ok=False)
    assert ops(env) == [("update", False), ("create", False)]
    assert env.balance() == 9


async def test_writes_that_keep_failing_their_condition_are_a_contended_rejection() -> None:
    env = AcquireEnv()
    image = env.stored()
    for _ in range(MAX_ROUNDS):
        env.bucket_io.inject(Fault.CONDITION_FAILED)
    with pytest.raises(RateLimitExceeded) as raised:
        await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    assert raised.value.contended
    assert len(ops(env)) == MAX_ROUNDS
    assert env.state().consumed == 0


async def test_rounds_that_run_out_on_a_drained_item_name_the_limit() -> None:
    """Found by the exactly-once matrix with tight limits (a call `contended` at its limit):
    the last failed condition returned an item with no room left for the call, so the refusal
    names the limit (issue 34 item 1: `contended` only when the call would fit)."""
    env = AcquireEnv()
    image = env.stored()
    for _ in range(MAX_ROUNDS):
        env.bucket_io.inject(Fault.CONDITION_FAILED)
    update = env.bucket_io.update
    sent = 0

    async def draining_last(*args: Any, **kwargs: Any) -> BucketImage:
        nonlocal sent
        sent += 1
        if sent == MAX_ROUNDS:  # another writer takes the whole limit before the last round
            env.stored(states=env.drained())
        return await update(*args, **kwargs)

    env.bucket_io.update = draining_last  # type: ignore[method-assign]
    with pytest.raises(RateLimitExceeded) as raised:
        await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    assert not raised.value.contended
    assert [s.limit_name for s in raised.value.statuses if s.exceeded] == ["rpm"]
    assert env.state().consumed == 10 * MILLI  # the other writer's, nothing of ours


async def test_one_condition_failure_is_retried_and_lands() -> None:
    env = AcquireEnv()
    image = env.stored()
    env.bucket_io.inject(Fault.CONDITION_FAILED)
    await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    assert len(ops(env)) == 2
    assert env.state().consumed == 1 * MILLI


async def test_a_call_arriving_during_a_retry_is_planned_at_its_own_time() -> None:
    """A write that met another writer's is planned again at its first time (so a debit of a
    full bucket becomes the commuting form). A call that queued behind it later must not be
    folded in at that earlier time: on a full bucket, the refill between the two times would
    pay its debit back (10 left after two debits of a full 10)."""
    env = AcquireEnv()
    image = env.stored()  # full: 10, refilling 1 every 6 s
    env.bucket_io.inject(Fault.CONDITION_FAILED)  # the first call meets another writer's write

    async def twelve_seconds_later() -> list[Landed]:
        env.clock.advance(12_000)
        return await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)

    later = queue_during_the_first_write(env, twelve_seconds_later)
    await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    await later[0]
    assert env.state().consumed == 2 * MILLI
    assert env.balance() == 9  # the first debit refilled in the 12 s, the second just now


async def test_an_outage_raises_unavailable_and_debits_nothing() -> None:
    env = AcquireEnv()
    image = env.stored()
    env.bucket_io.inject(Fault.OUTAGE)
    with pytest.raises(Unavailable):
        await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    assert env.state().consumed == 0


async def test_changed_rules_stop_the_call_and_refund_what_landed() -> None:
    """The second item got a cascade parent since we saw it: the set of items is wrong, so the
    call restarts (RulesChanged) and the first item's debit is given back."""
    env = AcquireEnv()
    first = env.stored(resource="a")
    second = env.stored(resource="b")
    await env.admission.restamp(second, env.stamp(parent="org"))
    targets = [env.target(first, {"rpm": 3}), env.target(second, {"rpm": 3}, read_now=False)]
    with pytest.raises(RulesChanged):
        await env.admission.debit(targets, local_ok=False)
    assert env.state("a").consumed == 0
    assert env.balance("a") == 10
    assert env.state("b").consumed == 0


async def test_a_call_queued_behind_a_write_that_met_new_rules_is_not_planned_on_them() -> None:
    """Two calls of one process chose the user's item alone (their image says no parent); another
    process attached an organisation meanwhile (`set_parent`). The first call's write meets the
    new stamp and restarts (RulesChanged); the call queued behind it on the lane must restart too,
    not be planned on the item as found: it would debit the user without the organisation
    (`make sim` ci seed 437: the call after a re-attach left its organisation one call short)."""
    env = AcquireEnv()
    stale = env.stored()
    other = Admission(env.bucket_io, "ns1", env.admission.finder.resolver, ImageCache(1.0, 1_000),
                      env.clock, 7)  # fmt: skip
    await other.restamp(stale, env.stamp(parent="org"))

    async def second() -> list[Landed]:
        return await env.admission.debit(
            [env.target(stale, {"rpm": 1}, read_now=False)], local_ok=False
        )

    queued = queue_during_the_first_write(env, second)
    with pytest.raises(RulesChanged):
        await env.admission.debit([env.target(stale, {"rpm": 1}, read_now=False)], local_ok=False)
    with pytest.raises(RulesChanged):
        await queued[0]
    assert env.state().consumed == 0


async def test_a_refund_on_an_item_whose_rules_changed_is_planned_again_and_lands() -> None:
    """Another process attached an organisation to the user's item after its debit landed
    (`set_parent` while the call ran): the refund's write meets the new stamp, and it is planned
    again on the item as found, not dropped (before issue 41 it failed with RulesChanged and the
    debit stayed: `make sim` found it, ci seed 36, on the library of that day)."""
    env = AcquireEnv()
    [landed] = await env.admission.debit([env.target(env.stored(), {"rpm": 3})], local_ok=False)
    other = Admission(env.bucket_io, "ns1", env.admission.finder.resolver, ImageCache(1.0, 1_000),
                      env.clock, 7)  # fmt: skip
    await other.restamp(env.stored(), env.stamp(parent="org"))
    before = env.state().consumed
    env.bucket_io.calls.clear()
    await env.admission.refund([landed])
    assert env.state().consumed == before - 3 * MILLI
    assert [call.operation for call in env.bucket_io.writes()] == ["update", "update"]
