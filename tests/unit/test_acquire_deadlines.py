"""The resolution bound holds in time (docs/on-unavailable.md): re-sends stop by the
clock, not by a count that multiplies the read timeout, and `open()` refuses timeouts that could
let a late copy of a write land after the exactly-once rules stop watching for it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.config import Config

from support.acquire_env import AcquireEnv
from support.memory_bucket_io import MemoryBucketIO
from zae_limiter import Repository, ValidationError
from zae_limiter.acquire import deadlines
from zae_limiter.acquire.deadlines import Backoff, Deadlines
from zae_limiter.acquire.lanes import PRUNE_AGE_MS, UNKNOWN_RESENDS
from zae_limiter.acquire.values import AnswerLost, Unavailable
from zae_limiter.core import bounds
from zae_limiter.dynamo import transport


class SlowLosingBucketIO(MemoryBucketIO):
    """Every update takes `read_s` seconds of the writer's clock and loses its answer."""

    def __init__(self, env: AcquireEnv, read_s: float) -> None:
        super().__init__()
        self.env = env
        self.read_s = read_s
        self.sent_at: list[int] = []

    async def update(self, *args: Any, **kwargs: Any) -> Any:
        self.sent_at.append(self.env.clock())
        self.env.clock.advance(seconds=self.read_s)
        raise AnswerLost(TimeoutError("read timeout"))


async def test_re_sends_stop_by_time_whatever_the_read_timeout() -> None:
    env = AcquireEnv(backoff=Backoff(scale=0.0))
    bucket_io = SlowLosingBucketIO(
        env, read_s=34
    )  # the timeout that made 9 sends outlive the rules
    bucket_io.items = env.bucket_io.items
    env.admission.waves.bucket_io = bucket_io
    image = env.stored()
    with pytest.raises(Unavailable):  # (every send loses its answer and none lands)
        await env.admission.debit([env.target(image, {"rpm": 1})], local_ok=False)
    first, last = bucket_io.sent_at[0], bucket_io.sent_at[-1]
    assert last - first <= bounds.RESEND_BOUND_MS  # no send began after the bound
    assert len(bucket_io.sent_at) < UNKNOWN_RESENDS + 1  # the count alone would have sent 9
    lanes = env.admission.waves.lanes  # then the writer's entry decided it: not landed
    assert (lanes.undecided, lanes.resolved_by_read) == (0, 1)


def test_the_longest_resolution_bound_fits_what_the_rules_assume() -> None:
    worst = Config(connect_timeout=5, read_timeout=bounds.MAX_REQUEST_TIMEOUT_S - 5)
    timeouts = transport.request_timeouts(worst)
    deadlines.check_request_timeouts(*timeouts)  # accepted
    bound_ms = bounds.resolution_bound_s(*timeouts, transport.MAX_ATTEMPTS) * 1000
    assert bound_ms + bounds.ASSUMED_SKEW_MS < PRUNE_AGE_MS


@pytest.mark.parametrize(
    "config",
    [Config(read_timeout=34), Config(connect_timeout=10, read_timeout=11)],
)
async def test_open_refuses_timeouts_that_outlive_the_exactly_once_rules(config: Config) -> None:
    with pytest.raises(ValidationError, match="read_timeout must be at most 20 s"):
        await Repository.open(table="t", endpoint_url="http://127.0.0.1:9", client_config=config)


@pytest.mark.parametrize("value", [0, -1, float("nan"), "1", True])
async def test_a_bad_acquire_timeout_is_refused_before_any_io(value: Any) -> None:
    with pytest.raises(ValidationError, match="acquire_timeout"):
        await Repository.open(table="t", endpoint_url="http://127.0.0.1:9", acquire_timeout=value)


def test_the_acquire_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(deadlines.ENV_ACQUIRE_TIMEOUT, raising=False)
    assert deadlines.acquire_timeout(deadlines.DEFAULT) == 1.0
    monkeypatch.setenv(deadlines.ENV_ACQUIRE_TIMEOUT, "0.25")
    assert deadlines.acquire_timeout(deadlines.DEFAULT) == 0.25
    assert deadlines.acquire_timeout(2) == 2.0  # the argument wins
    monkeypatch.setenv(deadlines.ENV_ACQUIRE_TIMEOUT, "none")
    assert deadlines.acquire_timeout(deadlines.DEFAULT) is None
    monkeypatch.setenv(deadlines.ENV_ACQUIRE_TIMEOUT, "soon")
    with pytest.raises(ValidationError, match="ZAEL_ACQUIRE_TIMEOUT"):
        deadlines.acquire_timeout(deadlines.DEFAULT)


async def test_one_timer_serves_every_deadline_and_a_shorter_one_is_not_late() -> None:
    deadlines = Deadlines()

    async def wait(timeout: float) -> bool:
        """True when the deadline (not a caller) cancelled the wait."""
        entry = deadlines.enter(timeout)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            return deadlines.leave(entry)
        raise AssertionError("not cancelled")

    long = asyncio.ensure_future(wait(3600))
    await asyncio.sleep(0)  # its deadline is entered first, with the timer armed for it
    short = asyncio.ensure_future(wait(0.001))
    assert await asyncio.wait_for(short, 60) is True  # a hang guard: its own deadline fired
    assert not long.done()
    long.cancel()  # a caller's cancellation is not the deadline's
    assert await long is False
    assert not deadlines._entries
