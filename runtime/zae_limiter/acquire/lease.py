"""`Lease` and `LeaseResource`: what an acquire holds until its block exits
(docs/getting-started.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import validation
from ..core import bucket
from ..core.bucket import MILLI
from ..errors import LeaseExpiredError, ValidationError
from .values import Landed, ResourcePlan, Target

if TYPE_CHECKING:
    from ..limiter import _Acquisition


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


class LeaseResource:
    """One resource of a lease: adjust, consume, release, and what it has taken."""

    def __init__(self, lease: Lease, resource: str) -> None:
        self._lease = lease
        self.name = resource

    @property
    def _hold(self) -> ResourceHold:
        return self._lease._holds[self.name]

    def _open_hold(self) -> ResourceHold:
        """The hold, for the members that change it: LeaseExpiredError after the block."""
        self._lease._check_open()
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
        return self._live_overdrawn()

    def _live_overdrawn(self) -> list[str]:
        hold = self._hold
        if hold.child is None:
            return []
        image = self._lease._acq.admission.images.get(
            (hold.child.target.image.ns, hold.child.target.entity_id, self.name, 0)
        )
        current = image[0] if image else hold.child.target.image
        now = self._lease._acq.clock()
        out = []
        for params in current.stamp.limits:
            if not params.soft:
                continue
            state = current.states.get(params.name)
            if state is None:
                continue
            balance = bucket.view(params, state, now, current.slot).balance
            balance -= hold.pending.get(params.name, 0) * MILLI
            if balance < 0:
                out.append(params.name)
        return out

    async def consume(self, **amounts: int) -> None:
        """Take more now, all or none, judged against the live balance."""
        checked = validation.amounts(amounts, "consume")
        hold = self._open_hold()
        hold.check_names(checked)
        await self._lease._acq.consume_more(hold, checked)

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
        self._lease._check_open()
        checked = validation.amounts(amounts, "release")
        await self.adjust(**{name: -amount for name, amount in checked.items()})


class _NoopResource:
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

    def __init__(self, acquisition: _Acquisition | None, holds: dict[str, ResourceHold]) -> None:
        self._acq: _Acquisition = acquisition  # type: ignore[assignment]  # None only if degraded
        self._holds = holds
        self._open = True
        self._degraded = acquisition is None

    @classmethod
    def _degraded_lease(cls) -> Lease:
        return cls(None, {})

    @property
    def degraded(self) -> bool:
        """True only for the no-op lease yielded under on_unavailable=ALLOW during an outage."""
        return self._degraded

    def _check_open(self) -> None:
        if not self._open:
            raise LeaseExpiredError()

    def _close(self) -> None:
        """End the block: read-only members keep their final values (soft balances frozen)."""
        if self._open and not self._degraded:
            for name, hold in self._holds.items():
                hold.final_overdrawn = LeaseResource(self, name)._live_overdrawn()
        self._open = False

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(self._holds)

    def resource(self, name: str) -> LeaseResource:
        """The handle of one covered resource; ValidationError for any other name."""
        if self.degraded:
            return _NoopResource(name)  # type: ignore[return-value]
        if name not in self._holds:
            raise ValidationError(
                "resource", name, f"this lease covers {list(self._holds)}; use one of those"
            )
        return LeaseResource(self, name)

    def _primary(self) -> LeaseResource:
        if self.degraded:
            return _NoopResource("")  # type: ignore[return-value]
        return LeaseResource(self, next(iter(self._holds)))

    @property
    def consumed(self) -> dict[str, int]:
        return self._primary().consumed

    @property
    def bypassed(self) -> bool:
        return self._primary().bypassed

    @property
    def overdrawn(self) -> list[str]:
        return self._primary().overdrawn

    async def consume(self, **amounts: int) -> None:
        await self._primary().consume(**amounts)

    async def adjust(self, **amounts: int) -> None:
        await self._primary().adjust(**amounts)

    async def release(self, **amounts: int) -> None:
        await self._primary().release(**amounts)


def landed_items(holds: dict[str, ResourceHold]) -> list[Landed]:
    return [
        entry for hold in holds.values() for entry in (hold.child, hold.parent) if entry is not None
    ]


def pending_changes(holds: dict[str, ResourceHold]) -> list[tuple[Landed, dict[str, int]]]:
    """Net deferred adjustments per landed item, in milli; a parent only for names it declares."""
    out = []
    for hold in holds.values():
        delta = {n: a * MILLI for n, a in hold.pending.items() if a}
        if not delta:
            continue
        for entry in (hold.child, hold.parent):
            if entry is None:
                continue
            mine = {n: a for n, a in delta.items() if entry.target.stamp.params(n) is not None}
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
