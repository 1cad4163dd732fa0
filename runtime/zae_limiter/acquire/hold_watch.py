"""Telling leases at once that a concurrency hold of theirs was lost (docs/concurrency.md).

A lease's hold is lost when its process's entry lapses (the holder's clock passes its expiry:
renewals failed) or an image shows it removed (core.hold_ledger). `lease.hold_lost` is read on
demand; a lease that asked to be told (`on_hold_lost`, `wait_hold_lost`, the integrations'
`cancel_on_hold_lost`) is watched here: a timer at the ledger's next expiry and the ledger's
`on_removed` hook re-check the watched leases, each told once. Nothing runs while nobody
watches, so leases that never ask cost nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from ..core.hold_ledger import Ledger


@dataclass(eq=False)
class Watcher:
    """One lease's wish to be told: `lost()` says whether its hold is lost, `tell()` tells it."""

    lost: Callable[[], bool]
    tell: Callable[[], None]


class HoldWatch:
    """The watched leases of one writer (its ledger and clock)."""

    def __init__(self, ledger: Ledger, clock: Callable[[], int]) -> None:
        self.ledger = ledger
        self.clock = clock
        self.watchers: list[Watcher] = []
        self._timer: asyncio.TimerHandle | None = None

    def add(self, watcher: Watcher) -> None:
        """Watch a lease (told at once when its hold is already lost)."""
        self.watchers.append(watcher)
        self.ledger.on_removed = self.check
        self.check()

    def remove(self, watcher: Watcher) -> None:
        """Stop watching (the lease ended, or was told)."""
        if watcher in self.watchers:
            self.watchers.remove(watcher)
        if not self.watchers:
            self.ledger.on_removed = None
            self._cancel_timer()

    def check(self) -> None:
        """Tell every watched lease whose hold is lost now, then wait for the next expiry."""
        for watcher in [w for w in self.watchers if w.lost()]:
            self.remove(watcher)
            watcher.tell()
        self._arm()

    def _arm(self) -> None:
        self._cancel_timer()
        if not self.watchers:
            return
        now = self.clock()
        expiry = self.ledger.next_expiry(now)
        if expiry is None:
            return  # nothing held that could lapse; an image showing a removal still checks
        delay = (expiry - now) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self.check)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
