"""Refunds and exit adjustments on the in-memory bucket IO: all or none, exactly once, never
above a ceiling, never refused."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from support.acquire_env import AcquireEnv
from support.memory_bucket_io import Fault
from zae_limiter.acquire.deadlines import Backoff, outage_pause
from zae_limiter.acquire.waves import SETTLE_ROUNDS
from zae_limiter.core.bucket import MILLI
from zae_limiter.dynamo import keys
from zae_limiter.errors import RateLimitExceeded


async def test_a_refused_item_refunds_the_items_that_landed() -> None:
    env = AcquireEnv()
    free = env.stored(resource="a")
    full_looking = env.stored(resource="b")
    env.stored(resource="b", states=env.drained())  # drained since we saw it
    targets = [
        env.target(free, {"rpm": 4}),
        env.target(full_looking, {"rpm": 1}, read_now=False),
    ]
    with pytest.raises(RateLimitExceeded) as raised:
        await env.admission.debit(targets, local_ok=False)
    exceeded = [s for s in raised.value.statuses if s.exceeded]
    assert [s.resource for s in exceeded] == ["b"]  # judged on the item the guard returned
    assert env.state("a").consumed == 0
    assert env.balance("a") == 10
    image = env.bucket_io.image(keys.bucket(*free.address))
    assert image is not None and image.admissions == 0


async def test_a_refused_admission_s_refund_that_met_other_writers_lands() -> None:
    """Found by the soak (benchmarks/results/soak-2026-12-02.md: 78 such refunds): the refund of a
    refused admission's landed debit kept failing its condition, so it certainly did not land,
    and the debit stayed on a refund-only entity. A refund is never given up: it is planned
    again on what each failure returned until it lands."""
    env = AcquireEnv(backoff=Backoff(scale=0.0))
    free = env.stored(resource="a")
    full_looking = env.stored(resource="b")
    env.stored(resource="b", states=env.drained())
    targets = [
        env.target(free, {"rpm": 4}),
        env.target(full_looking, {"rpm": 1}, read_now=False),
    ]
    for _ in range(SETTLE_ROUNDS):
        env.bucket_io.inject(Fault.CONDITION_FAILED, nth=3)  # every round of the refund of a
    with pytest.raises(RateLimitExceeded):  # the refusal, after the refund landed
        await env.admission.debit(targets, local_ok=False)
    assert env.state("a").consumed == 0
    assert env.balance("a") == 10


async def test_a_refund_whose_response_is_lost_credits_once() -> None:
    env = AcquireEnv()
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    env.bucket_io.inject(Fault.LOST_RESPONSE)
    await env.admission.refund(landed)
    assert env.state().consumed == 0  # not -4: the resend did not apply again
    assert env.balance() == 10  # and not above the ceiling
    assert landed[0].debited == {} and landed[0].admissions == 0


async def test_a_second_refund_of_the_same_lease_gives_nothing_back() -> None:
    env = AcquireEnv()
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    await env.admission.refund(landed)
    writes = len(env.bucket_io.writes())
    await env.admission.refund(landed)
    assert len(env.bucket_io.writes()) == writes
    assert env.state().consumed == 0


async def test_a_refund_retries_through_a_brief_outage() -> None:
    env = AcquireEnv(backoff=Backoff(scale=0.0))
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    env.bucket_io.inject(Fault.OUTAGE)
    await env.admission.refund(landed)
    assert env.state().consumed == 0
    assert env.balance() == 10


@dataclass(frozen=True)
class RecordedBackoff(Backoff):
    """Pauses nothing; remembers every pause asked for."""

    pauses: list[float] = field(default_factory=list)

    async def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)


async def test_a_retry_pauses_as_the_injected_backoff_says() -> None:
    backoff = RecordedBackoff()
    env = AcquireEnv(backoff=backoff)
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    env.bucket_io.inject(Fault.OUTAGE)
    await env.admission.refund(landed)
    assert backoff.pauses == [outage_pause(1)]  # one outage: one pause before the retry
    assert env.state().consumed == 0


async def test_a_refund_after_the_limit_refilled_stays_under_the_ceiling() -> None:
    env = AcquireEnv()
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 10})], local_ok=True)
    env.clock.advance(minutes=1)  # refilled to full meanwhile
    await env.admission.refund(landed)
    assert env.balance() == 10
    assert env.state().consumed == 0


async def test_exit_adjustments_are_forced_past_the_limit_and_never_refuse() -> None:
    env = AcquireEnv()
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 5})], local_ok=True)
    await env.admission.apply_adjustments([(landed[0], {"rpm": 20 * MILLI})])
    assert env.state().consumed == 25 * MILLI
    assert env.balance() < 0  # overdrawn by the adjustment, as documented for exit writes


async def test_a_negative_adjustment_credits_back() -> None:
    env = AcquireEnv()
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 5})], local_ok=True)
    await env.admission.apply_adjustments([(landed[0], {"rpm": -3 * MILLI})])
    assert env.state().consumed == 2 * MILLI
    assert env.balance() == 8


async def test_a_refund_that_keeps_failing_its_condition_lands() -> None:
    """Found by the soak (benchmarks/results/soak-2026-12-01.md): a refund whose rounds ran out
    raised the internal `Contended` out of the public API. Now no count gives it up: it is
    planned again on each item a failed condition returns (another writer's write landed, so
    nothing spins), without a pause that would hold up the item's other calls, and lands."""
    backoff = RecordedBackoff()
    env = AcquireEnv(backoff=backoff)
    image = env.stored()
    landed = await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    for _ in range(SETTLE_ROUNDS + 3):
        env.bucket_io.inject(Fault.CONDITION_FAILED)
    await env.admission.refund(landed)
    assert env.state().consumed == 0
    assert backoff.pauses == []
