"""A fake clock for `Repository.open(clock=...)`: a callable returning epoch milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime

#: 2026-01-05 00:00:00 UTC, a Monday (weekly quotas reset on Mondays in the spec's examples).
DEFAULT_START_MS = 1_767_571_200_000


class FakeClock:
    """Mutable time source. `clock()` returns the current epoch ms; tests move it.

    >>> clock = FakeClock(1_000)
    >>> clock.advance(250); clock()
    1250
    >>> clock.advance(seconds=1.5); clock()
    2750
    """

    def __init__(self, start_ms: int = DEFAULT_START_MS) -> None:
        self._now = int(start_ms)

    def __call__(self) -> int:
        return self._now

    @property
    def now_ms(self) -> int:
        return self._now

    @property
    def now_seconds(self) -> float:
        return self._now / 1000

    def advance(
        self,
        ms: int = 0,
        *,
        seconds: float = 0,
        minutes: float = 0,
        hours: float = 0,
        days: float = 0,
    ) -> int:
        """Move forward (never backward) and return the new time in ms."""
        delta = ms + round((seconds + 60 * minutes + 3600 * hours + 86400 * days) * 1000)
        if delta < 0:
            raise ValueError("a clock only moves forward; use set() to go back")
        self._now += int(delta)
        return self._now

    def set(self, ms: int) -> int:
        """Jump to an absolute epoch-ms time (either direction)."""
        self._now = int(ms)
        return self._now

    def set_datetime(self, when: datetime) -> int:
        """Jump to a datetime (naive means UTC)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return self.set(round(when.timestamp() * 1000))

    def datetime(self) -> datetime:
        return datetime.fromtimestamp(self._now / 1000, tz=UTC)

    def __repr__(self) -> str:
        return f"FakeClock({self._now} = {self.datetime().isoformat()})"
