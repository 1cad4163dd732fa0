"""`Lease` and `LeaseResource`: what an acquire holds until its block exits.

See docs/getting-started.md. A lease reads and changes its `LeaseState` (the holds, open or not);
writes go through the `LeaseWriter` that made it (the acquisition), which also writes the
ledger's pending changes on exit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from .. import validation
from ..core import bucket
from ..core.bucket import MILLI
from ..core.images import BucketImage
from ..errors import LeaseExpiredError, ValidationError
from .values import Landed, ResourcePlan, Target

log = logging.getLogger("zae_limiter")


def _nothing() -> None:
    return None


@dataclass
class ResourceHold:
    """One resource of a lease: its plan, what landed, what is still to be written."""

    plan: ResourcePlan
    child: Landed | None
    parent: Landed | None
    consumed: dict[str, int]  # whole units, net
    pending: dict[str, int] = field(default_factory=dict)  # whole units, deferred adjustments
    final_overdrawn: list[str] | None = None  # frozen when the block exits

    @property
    def declared(self) -> tuple[str, ...] | None:
        """Limit names the resource declares for the entity; None when unmetered."""
        return None if self.plan.child is None else self.plan.child.stamp.names

    def check_names(self, amounts: dict[str, int]) -> None:
        declared = self.declared
        if declared is None:
            return
        unknown = [name for name in amounts if name not in declared]
        if unknown:
            raise ValidationError(
                "limit name",
                unknown[0],
                f"resource {self.plan.resource!r} declares {list(declared)}; use one of those",
            )


@dataclass
class LeaseState:
    """What a lease holds, shared by the lease and the acquisition that made it."""

    holds: dict[str, ResourceHold]
    open: bool = True
    hold_lost: bool | None = None  # frozen when the block exits

    def check_open(self) -> None:
        if not self.open:
            raise LeaseExpiredError()

    def close(self, writer: LeaseWriter | None) -> None:
        """End the block: read-only members keep their final values (soft balances frozen)."""
        if self.open and writer is not None:
            for hold in self.holds.values():
                hold.final_overdrawn = writer.overdrawn(hold)
            self.hold_lost = writer.hold_lost(self.holds)
        self.open = False


class LeaseWriter(Protocol):
    """What a lease asks of the acquisition that made it."""

    async def consume_more(self, hold: ResourceHold, amounts: dict[str, int]) -> None: ...

    def overdrawn(self, hold: ResourceHold) -> list[str]: ...

    def now(self) -> int: ...

    def newest_image(self, image: BucketImage) -> BucketImage: ...

    def hold_lost(self, holds: dict[str, ResourceHold]) -> bool: ...

    def watch_hold(
        self, holds: dict[str, ResourceHold], tell: Callable[[], None], ended: Callable[[], None]
    ) -> Callable[[], None]: ...


class LeaseResource:
    """One resource of a lease: adjust, consume, release, and what it has taken."""

    def __init__(self, writer: LeaseWriter, ledger: LeaseState, resource: str) -> None:
        self._writer = writer
        self._ledger = ledger
        self.name = resource

    @property
    def _hold(self) -> ResourceHold:
        return self._ledger.holds[self.name]

    def _open_hold(self) -> ResourceHold:
        """The hold, for the members that change it: LeaseExpiredError after the block."""
        self._ledger.check_open()
        return self._hold

    @property
    def consumed(self) -> dict[str, int]:
        return dict(self._hold.consumed)

    @property
    def bypassed(self) -> bool:
        child = self._hold.child
        return bool(child and child.bypass)

    @property
    def overdrawn(self) -> list[str]:
        hold = self._hold
        if hold.final_overdrawn is not None:
            return list(hold.final_overdrawn)
        return self._writer.overdrawn(hold)

    async def consume(self, **amounts: int) -> None:
        """Take more now, all or none, judged against the live balance."""
        checked = validation.amounts(amounts, "consume")
        hold = self._open_hold()
        hold.check_names(checked)
        await self._writer.consume_more(hold, checked)

    async def adjust(self, **amounts: int) -> None:
        """Record a change (signed) to write on exit. Never rejects; net is clamped at 0."""
        checked = validation.amounts(amounts, "adjust", signed=True)
        hold = self._open_hold()
        hold.check_names(checked)
        for name, amount in checked.items():
            net = hold.consumed.get(name, 0)
            amount = max(amount, -net)
            hold.consumed[name] = net + amount
            hold.pending[name] = hold.pending.get(name, 0) + amount

    async def release(self, **amounts: int) -> None:
        """`adjust` with the amounts negated."""
        self._ledger.check_open()
        checked = validation.amounts(amounts, "release")
        await self.adjust(**{name: -amount for name, amount in checked.items()})


class NoopResource:
    """Handle on the degraded lease: every member is a no-op."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.consumed: dict[str, int] = {}
        self.bypassed = False
        self.overdrawn: list[str] = []

    async def consume(self, **amounts: int) -> None:
        return None

    async def adjust(self, **amounts: int) -> None:
        return None

    async def release(self, **amounts: int) -> None:
        return None


class Lease:
    """What `acquire()` yields. Lease-level members act on the primary resource."""

    def __init__(
        self, writer: LeaseWriter | None, ledger: LeaseState, *, degraded: bool = True
    ) -> None:
        self._writer = writer  # None only for a no-op lease (degraded, or not limited)
        self._ledger = ledger
        self._degraded = writer is None and degraded

    @property
    def degraded(self) -> bool:
        """True only for the no-op lease yielded under on_unavailable=ALLOW during an outage."""
        return self._degraded

    def _check_open(self) -> None:
        self._ledger.check_open()

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(self._ledger.holds)

    def resource(self, name: str) -> LeaseResource:
        """The handle of one covered resource; ValidationError for any other name."""
        if self._writer is None:
            return NoopResource(name)  # type: ignore[return-value]
        holds = self._ledger.holds
        if name not in holds:
            raise ValidationError(
                "resource", name, f"this lease covers {list(holds)}; use one of those"
            )
        return LeaseResource(self._writer, self._ledger, name)

    def _primary(self) -> LeaseResource:
        if self._writer is None:
            return NoopResource("")  # type: ignore[return-value]
        return LeaseResource(self._writer, self._ledger, next(iter(self._ledger.holds)))

    @property
    def consumed(self) -> dict[str, int]:
        return self._primary().consumed

    @property
    def bypassed(self) -> bool:
        return self._primary().bypassed

    @property
    def overdrawn(self) -> list[str]:
        return self._primary().overdrawn

    @property
    def hold_lost(self) -> bool:
        """True when a concurrency hold of this lease expired before the lease ended: another
        writer may have given it back, so its exit gives nothing of it back twice."""
        if self._writer is None:
            return False
        if self._ledger.hold_lost is not None:
            return self._ledger.hold_lost
        return self._writer.hold_lost(self._ledger.holds)

    async def on_hold_lost(self, callback: Callable[[], object]) -> None:
        """Call `callback()` once, as soon as a concurrency hold of this lease is lost (its
        renewals failed for a `lease_ttl`, or another writer freed it): at once if it is lost
        already, never after the lease ended. It runs on the event loop (the sync facade's
        own thread for a `SyncLease`); an exception it raises is logged."""
        self._check_open()
        if self._writer is None:
            return  # a no-op lease holds nothing
        loop = asyncio.get_running_loop()

        def run() -> None:
            try:
                callback()
            except Exception:
                log.exception("an on_hold_lost callback raised")

        def tell() -> None:
            loop.call_soon(run)  # off the write path that found the loss

        self._writer.watch_hold(self._ledger.holds, tell, _nothing)

    async def wait_hold_lost(self, timeout: float | None = None) -> bool:
        """Wait until a concurrency hold of this lease is lost: True. False when the lease ends
        first, or after `timeout` seconds (None: no limit). After the lease ended: `hold_lost`."""
        if not self._ledger.open:
            return self.hold_lost
        if self._writer is None:
            return False  # a no-op lease holds nothing to lose
        told: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def answer(value: bool) -> None:
            if not told.done():
                told.set_result(value)

        unwatch = self._writer.watch_hold(
            self._ledger.holds, lambda: answer(True), lambda: answer(False)
        )
        try:
            return await asyncio.wait_for(told, timeout)
        except TimeoutError:
            return False
        finally:
            unwatch()

    async def consume(self, **amounts: int) -> None:
        await self._primary().consume(**amounts)

    async def adjust(self, **amounts: int) -> None:
        await self._primary().adjust(**amounts)

    async def release(self, **amounts: int) -> None:
        await self._primary().release(**amounts)


def writer_of(lease: Lease) -> LeaseWriter | None:
    """The acquisition that made `lease` (None for the degraded lease)."""
    return lease._writer


def holds_of(lease: Lease) -> dict[str, ResourceHold]:
    """Each resource `lease` covers and its hold, primary first (read them, do not change them)."""
    return lease._ledger.holds


def degraded_lease(ledger: LeaseState) -> Lease:
    """The no-op lease yielded under on_unavailable=ALLOW during an outage."""
    return Lease(None, ledger)


def unlimited_lease() -> Lease:
    """The no-op lease of a request the integrations let through unlimited (covers nothing,
    not degraded)."""
    return Lease(None, LeaseState({}), degraded=False)


def overdrawn_names(image: BucketImage, pending: dict[str, int], now: int) -> list[str]:
    """Soft limits of `image` below zero at `now`, counting `pending` (whole units) too."""
    out = []
    for params in image.stamp.limits:
        if not params.soft:
            continue
        state = image.states.get(params.name)
        if state is None:
            continue
        balance = bucket.view(params, state, now, image.slot).balance
        balance -= pending.get(params.name, 0) * MILLI
        if balance < 0:
            out.append(params.name)
    return out


def landed_items(holds: dict[str, ResourceHold]) -> list[Landed]:
    return [
        entry for hold in holds.values() for entry in (hold.child, hold.parent) if entry is not None
    ]


def pending_changes(holds: dict[str, ResourceHold]) -> list[tuple[Landed, dict[str, int]]]:
    """Net deferred adjustments per landed item, in milli; a parent only for names it declares.
    A concurrency limit's hold is given back whole (what it held, after any adjustment)."""
    out = []
    for hold in holds.values():
        delta = {n: a * MILLI for n, a in hold.pending.items() if a}
        for entry in (hold.child, hold.parent):
            if entry is None:
                continue
            stamp = entry.target.stamp
            mine = {n: a for n, a in delta.items() if stamp.params(n) is not None}
            for name in entry.held:
                mine[name] = -entry.debited.get(name, 0)
            mine = {n: a for n, a in mine.items() if a}
            if mine:
                out.append((entry, mine))
    return out


def apply_to_debited(entry: Landed, delta: dict[str, int]) -> None:
    for name, amount in delta.items():
        entry.debited[name] = entry.debited.get(name, 0) + amount


def target_for_more(entry: Landed, amounts: dict[str, int]) -> Target:
    """The landed item as a target for consume(): not read in this call, only names it declares."""
    target = entry.target
    mine = {n: a * MILLI for n, a in amounts.items() if target.stamp.params(n) is not None}
    return replace(target, exists=True, read_now=False, amounts=mine, tried=frozenset())
