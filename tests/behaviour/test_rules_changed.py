"""Bucket rules that keep changing under an acquire (concurrent `set_limits` restamping the item)
never let the internal `RulesChanged` signal out: finding the targets restarts like a refused
debit does, and an exit write that cannot land is `RateLimiterUnavailable` (docs/errors.md).
Found by `tests/aggregator/test_audit_completeness.py` (96 concurrent `set_limits`)."""

from __future__ import annotations

from typing import Any

import pytest

from zae_limiter import Limit, RateLimiter, RateLimiterUnavailable
from zae_limiter.acquire import Admission, RulesChanged
from zae_limiter.acquire.waves import WaveResult, Waves

pytestmark = pytest.mark.ddb


async def test_rules_changing_while_targets_are_found_restart_the_admission(
    limiter: RateLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    targets = Admission.targets
    raised: list[int] = []

    async def racing(self: Admission, *args: Any, **kwargs: Any) -> Any:
        if len(raised) < 2:
            raised.append(1)
            raise RulesChanged()
        return await targets(self, *args, **kwargs)

    monkeypatch.setattr(Admission, "targets", racing)
    async with limiter.acquire("u1", "search", {"rpm": 1}) as lease:
        assert lease.consumed == {"rpm": 1}
    assert len(raised) == 2


async def test_rules_that_never_settle_are_unavailable_not_an_internal_error(
    limiter: RateLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])

    async def always(self: Admission, *args: Any, **kwargs: Any) -> Any:
        raise RulesChanged()

    monkeypatch.setattr(Admission, "targets", always)
    with pytest.raises(RateLimiterUnavailable):
        async with limiter.acquire("u1", "search", {"rpm": 1}):
            pass


async def test_an_exit_write_whose_rules_keep_changing_is_unavailable(
    limiter: RateLimiter, monkeypatch: pytest.MonkeyPatch
) -> None:
    await limiter.set_resource_defaults("search", [Limit.per_minute("rpm", 10)])
    write_all = Waves.write_all

    async def racing_exit(self: Waves, jobs: Any, *, settle: bool, **more: Any) -> WaveResult:
        if settle:  # the exit's write, not sent: its item was restamped every round
            return WaveResult([], [], RulesChanged(), [target for target, _ in jobs])
        return await write_all(self, jobs, settle=settle, **more)

    monkeypatch.setattr(Waves, "write_all", racing_exit)
    with pytest.raises(RateLimiterUnavailable):
        async with limiter.acquire("u1", "search", {"rpm": 1}) as lease:
            await lease.adjust(rpm=2)
