"""`Acquisition`: one `acquire()` call from admission to exit (docs/getting-started.md).

It restarts an admission whose bucket rules changed under it, holds what landed for the lease,
debits more for `consume_more`, writes the lease's exit (adjustments or a refund), applies the
`on_unavailable` policy, and translates the acquire path's errors (`values`) into the documented
exceptions, once (`_describe`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from ..caches import ImageCache
from ..core.images import BucketImage
from ..errors import PermissionDenied, RateLimiterUnavailable, RateLimitExceeded
from ..limits import Limit
from ..models import OnUnavailable
from .admission import Admission
from .hold_watch import Watcher
from .lease import (
    Lease,
    LeaseState,
    ResourceHold,
    apply_to_debited,
    degraded_lease,
    landed_items,
    overdrawn_names,
    pending_changes,
    target_for_more,
)
from .pending import DeadlinePassed, Pending
from .planning import item_key
from .values import (
    Landed,
    Overloaded,
    ResourcePlan,
    RulesChanged,
    Target,
    Unavailable,
    failed_below,
)

log = logging.getLogger("zae_limiter")

_RESTARTS = 3


@dataclass(frozen=True)
class AcquisitionParts:
    """What every acquisition of one namespace scope works with, composed by `Repository`
    (which owns the scope and the feature gates: this module imports neither)."""

    admission: Admission
    clock: Callable[[], int]
    pending: Pending
    table_name: str
    #: the call's `on_unavailable`, else the stored one, else BLOCK (no I/O)
    unavailable_mode: Callable[[OnUnavailable | None], OnUnavailable]
    #: refuse `acquire(limits=[...])` that needs a feature the stack's aggregator lacks
    check_gates: Callable[[Sequence[Limit]], Awaitable[None]]


class Acquisition:
    """The async context manager behind `acquire()`; also serves the lease's writes."""

    def __init__(
        self,
        parts: AcquisitionParts,
        entity_id: str,
        requests: dict[str, dict[str, int]],
        limits: list[Limit] | None,
        on_unavailable: OnUnavailable | None,
        timeout: float | None,
    ) -> None:
        self.parts = parts
        self.admission = parts.admission
        self.clock = parts.clock
        self.entity_id = entity_id
        self.requests = requests
        self.limits = limits
        self.on_unavailable = on_unavailable
        self.lease: Lease | None = None
        self.ledger = LeaseState({})
        self.mode = OnUnavailable.BLOCK
        self.timeout = timeout
        self.moved_hold = False  # a hold was lost and taken again: hold_lost stays True
        self.pending = parts.pending
        self.watchers: list[tuple[Watcher, Callable[[], None]]] = []  # (watcher, ended)
        self.admitted_at = 0

    def _describe(
        self, message: str, cause: BaseException, reason: str = "unavailable"
    ) -> RateLimiterUnavailable:
        """The documented exception for an acquire-path failure: the one translation."""
        root = failed_below(cause)
        if isinstance(cause, Unavailable) and cause.denied is not None:
            return PermissionDenied(
                f"DynamoDB refused dynamodb:{cause.denied}; attach the zae-limiter 'app' "
                "managed policy (or 'admin' for administrative calls) to this role",
                root,
                table_name=self.parts.table_name,
                entity_id=self.entity_id,
            )
        return RateLimiterUnavailable(
            message,
            root,
            table_name=self.parts.table_name,
            entity_id=self.entity_id,
            resource=next(iter(self.requests)),
            reason=reason,
        )

    def _unavailable(
        self, message: str, cause: BaseException, reason: str = "unavailable"
    ) -> Lease:
        """`on_unavailable` for an admission that was not decided: raise, or the degraded lease."""
        error = self._describe(message, cause, reason)
        self.mode = self.parts.unavailable_mode(self.on_unavailable)
        if isinstance(error, PermissionDenied) or self.mode is OnUnavailable.BLOCK:
            raise error from cause
        log.warning("acquire admitted without metering under on_unavailable=ALLOW: %s", error)
        self.lease = degraded_lease(self.ledger)
        return self.lease

    async def __aenter__(self) -> Lease:
        if self.pending.full:
            return self._unavailable(
                f"{self.pending.count} acquire outcomes are still being resolved off callers' "
                "paths; nothing was debited",
                RuntimeError("too many unresolved outcomes"),
            )
        deadlines = self.pending.deadlines
        deadline = None if self.timeout is None else deadlines.enter(self.timeout)
        traffic = self.admission.traffic  # its clock: `time.monotonic` (no Python call)
        decide_by = None if self.timeout is None else (traffic.clock() + self.timeout) * 1000
        expired = False
        try:
            try:  # the deadline cancels this task; `_admit` is safe to cancel
                holds = await self._admit(decide_by)
            finally:
                expired = deadline is not None and deadlines.leave(deadline)
        except RateLimitExceeded:
            traffic.decided += 1
            raise
        except asyncio.CancelledError:
            if not expired:
                raise
            return self._unavailable(
                f"no decision within the {self.timeout:g} s deadline; any debit that lands "
                "will be refunded",
                DeadlinePassed(),
            )
        except Overloaded as exc:
            return self._unavailable(
                f"overloaded: the table cannot decide this call within its {self.timeout:g} s "
                f"deadline ({exc}); nothing was debited",
                exc,
                "overloaded",
            )
        except Unavailable as exc:
            return self._unavailable(f"DynamoDB is unavailable; {_what_was_debited(exc)}", exc)
        traffic.decided += 1
        self.ledger.holds = holds
        self.admitted_at = self.clock()
        self.lease = Lease(self, self.ledger)
        return self.lease

    async def _admit(self, deadline: float | None) -> dict[str, ResourceHold]:
        if self.limits:
            await self.parts.check_gates(self.limits)
        for attempt in range(_RESTARTS):
            try:  # finding the targets may restamp an item, which concurrent changes can race
                plans = await self.admission.targets(self.entity_id, self.requests, self.limits)
                targets = [t for p in plans for t in (p.child, p.parent) if t is not None]
                if len(targets) == 1:  # one write, in this task (not via _debit: 2 calls)
                    landed = await self.admission.debit(targets, local_ok=True, deadline=deadline)
                else:
                    landed = await self._debit(targets, deadline) if targets else []
            except RulesChanged:
                if attempt + 1 == _RESTARTS:
                    raise Unavailable(RuntimeError("bucket rules kept changing")) from None
                continue
            return self._holds(plans, landed)
        raise AssertionError("unreachable")

    async def _debit(self, targets: list[Target], deadline: float | None) -> list[Landed]:
        """Several writes, safe to cancel: they run as a task that goes on, and refunds what
        landed, when the caller leaves. (One write is safe to cancel in the caller's task: the
        lanes resolve a write its caller left; `_admit` sends it directly.)"""
        work = self.admission.debit(targets, local_ok=True, deadline=deadline)
        return await self.pending.bounded(work, None, self.admission.refund_for_departed)

    @staticmethod
    def _holds(plans: list[ResourcePlan], landed: list[Landed]) -> dict[str, ResourceHold]:
        holds = {}
        for plan in plans:
            child = next((x for x in landed if x.target is not None and _same(x, plan.child)), None)
            parent = next((x for x in landed if _same(x, plan.parent)), None)
            holds[plan.resource] = ResourceHold(plan, child, parent, dict(plan.amounts))
        return holds

    async def consume_more(self, hold: ResourceHold, amounts: dict[str, int]) -> None:
        entries = [e for e in (hold.child, hold.parent) if e is not None]
        targets = [target_for_more(e, amounts) for e in entries]
        targets = [t for t in targets if t.amounts]
        traffic = self.admission.traffic
        deadline = None if self.timeout is None else (traffic.clock() + self.timeout) * 1000
        try:
            landed = await self.pending.bounded(
                self.admission.debit(targets, local_ok=False, admissions=0, deadline=deadline),
                self.timeout,
                self.admission.refund_for_departed,
            )
        except Overloaded as exc:
            raise self._describe(
                f"overloaded: the table cannot decide this within the {self.timeout:g} s "
                f"deadline ({exc}); nothing more was debited",
                exc,
                "overloaded",
            ) from exc
        except DeadlinePassed as exc:
            raise self._describe(
                f"no decision within the {self.timeout:g} s deadline; any further debit that "
                "lands will be refunded",
                exc,
            ) from exc
        except Unavailable as exc:
            raise self._describe(
                f"DynamoDB is unavailable; {_what_was_debited(exc, 'more ')}", exc
            ) from exc
        except RulesChanged as exc:  # what landed of it was given back (Admission.debit)
            raise self._describe(
                "the entity's bucket rules changed while this lease was open (its parent, "
                "cascade, limits or flags, or it was deleted); nothing more was debited (the "
                "lease's exit still settles on the items it debited; a new acquire() takes "
                "more under the new rules)",
                exc,
            ) from exc
        for new in landed:
            for entry in entries:
                if _same(entry, new.target):
                    entry.target = replace(entry.target, image=new.target.image)
                    self._hold_moved(entry, new)
                    apply_to_debited(entry, new.debited)
                    entry.periods.update(new.periods)
        for name, amount in amounts.items():
            hold.consumed[name] = hold.consumed.get(name, 0) + amount

    def _hold_moved(self, entry: Landed, new: Landed) -> None:
        """More held on a new entry because the lease's was lost (a new entry is started only
        then): the lost part is forgotten, so the exit gives back only what the new entry holds
        for this lease, never what another writer freed already nor another lease's part."""
        item = item_key(entry.target.image)
        for name, key in new.held.items():
            old = entry.held.get(name)
            if old is not None and old != key:
                self.admission.ledger.forget(item, name, old, entry.debited.get(name, 0))
                entry.debited[name] = 0
                self.moved_hold = True
            entry.held[name] = key

    def now(self) -> int:
        return self.clock()

    def newest_image(self, image: BucketImage) -> BucketImage:
        """The newest image of `image`'s item this client has seen."""
        cached = self.admission.images.get(ImageCache.key_of(image))
        return cached[0] if cached is not None and cached[0].stamp_seq >= image.stamp_seq else image

    def hold_lost(self, holds: dict[str, ResourceHold]) -> bool:
        """Whether an entry a concurrency hold of these was taken on is lost (core.hold_ledger)."""
        ledger, now = self.admission.ledger, self.clock()
        return self.moved_hold or any(
            not ledger.holds(item_key(entry.target.image), name, key, now)
            for entry in landed_items(holds)
            for name, key in entry.held.items()
        )

    def _note_held(self, entry: Landed) -> None:
        item, lasted = item_key(entry.target.image), self.clock() - self.admitted_at
        for name in entry.held:
            self.admission.ledger.held_for(item, name, lasted)

    def watch_hold(
        self, holds: dict[str, ResourceHold], tell: Callable[[], None], ended: Callable[[], None]
    ) -> Callable[[], None]:
        """`tell()` once when a hold of these is lost; `ended()` instead if the lease ends
        first. Returns the function that stops watching."""
        watch = self.admission.hold_watch
        watcher = Watcher(lambda: self.hold_lost(holds), tell)
        entry = (watcher, ended)
        self.watchers.append(entry)

        def unwatch() -> None:
            watch.remove(watcher)
            if entry in self.watchers:
                self.watchers.remove(entry)

        watch.add(watcher)
        return unwatch

    def _end_watches(self) -> None:
        """The lease ended: no watcher of it is told any more; waiters learn it ended."""
        watchers, self.watchers = self.watchers, []
        for watcher, ended in watchers:
            self.admission.hold_watch.remove(watcher)
            ended()

    def overdrawn(self, hold: ResourceHold) -> list[str]:
        """Soft limits of the hold's item below zero now, on the newest image seen."""
        if hold.child is None:
            return []
        target = hold.child.target
        cached = self.admission.images.get((target.image.ns, target.entity_id, target.resource, 0))
        current = cached[0] if cached else target.image
        return overdrawn_names(current, hold.pending, self.clock())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        lease = self.lease
        self.ledger.close(None if lease is None or lease.degraded else self)
        if self.watchers:
            self._end_watches()
        if lease is None or lease.degraded:
            return
        holds = self.ledger.holds
        landed = landed_items(holds)
        for entry in landed:  # how long its concurrency holds lasted: a refusal's estimate
            if entry.held:
                self._note_held(entry)
        if exc_type is not None:
            work = self.admission.refund(landed)
        else:
            changes = pending_changes(holds)
            if not changes:
                return
            work = self.admission.apply_adjustments(changes)
        try:
            await self.pending.bounded(work, self.timeout, None)
        except DeadlinePassed:
            log.warning(
                "the exit of %s's lease goes on after its %s s deadline: it lands off the "
                "caller's path",
                self.entity_id,
                self.timeout,
            )
        except Unavailable as failure:
            if exc_type is not None:
                log.error("refund could not land for %s: %s", self.entity_id, failure)
                return  # the original exception propagates
            error = self._describe("the exit write could not land", failure)
            self.mode = self.parts.unavailable_mode(self.on_unavailable)
            if isinstance(error, PermissionDenied) or self.mode is OnUnavailable.BLOCK:
                raise error from failure
            log.error(
                "exit write lost for entity %s, amounts %s: %s",
                self.entity_id,
                {r: h.pending for r, h in holds.items()},
                error,
            )


def _what_was_debited(exc: Unavailable, more: str = "") -> str:
    """What a failed admission is known to have left: only an unknown outcome may have landed."""
    if exc.maybe_landed:
        return (
            f"whether a {more}debit landed is unknown (its answers were lost; logged and counted "
            "in undecided_writes)"
        )
    return f"nothing {more}was debited"


def _same(entry: Landed | None, target: Any) -> bool:
    if entry is None or target is None:
        return False
    t = entry.target
    return (t.entity_id, t.resource, t.role) == (target.entity_id, target.resource, target.role)
