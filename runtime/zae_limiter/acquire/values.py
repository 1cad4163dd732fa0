"""The values the acquire path passes between its steps: targets, plans, landed writes, errors.

Targets and plans are immutable: a step that learns something new returns a changed copy
(`dataclasses.replace`), so a value seen by one step never changes under another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from ..core.bucket import LimitWrite
from ..core.images import BucketImage, Stamp

ENTITY = "entity"
PARENT = "parent"


@dataclass(frozen=True)
class Target:
    """One bucket item a call writes, as this process last knows it.

    `exists`: the item is stored (a write updates it; otherwise it creates it). `seen_at`: when
    `image` was read or returned by a write. `read_now`: `image` was read in this call, so a
    planner may refuse on it. `amounts`: milli per limit name the stamp declares. `tried`: shards
    tried in this call. `surveyed`: every shard was read in this call (once at most). `moved`:
    capacity was moved to its shard from another Region's in this call (once at most).
    """

    entity_id: str
    resource: str
    role: str  # ENTITY or PARENT
    image: BucketImage
    _: KW_ONLY
    exists: bool
    seen_at: int
    read_now: bool
    amounts: dict[str, int] = field(default_factory=dict)
    tried: frozenset[int] = frozenset()
    surveyed: bool = False
    moved: bool = False  # capacity was moved to its shard in this call (acquire.transfers)

    @property
    def stamp(self) -> Stamp:
        return self.image.stamp

    def same_item(self, other: Target | None) -> bool:
        """The same (entity, resource, role), whatever shard or image."""
        return other is not None and (self.entity_id, self.resource, self.role) == (
            other.entity_id,
            other.resource,
            other.role,
        )


@dataclass(frozen=True)
class ResourcePlan:
    """What one resource of an acquire resolved to."""

    resource: str
    amounts: dict[str, int]  # whole units, as asked
    child: Target | None  # None: unmetered for this entity
    parent: Target | None

    @property
    def targets(self) -> tuple[Target, ...]:
        return tuple(t for t in (self.child, self.parent) if t is not None)


@dataclass
class Landed:
    """What a write left on one item, so that the lease can reconcile or refund it.

    Mutable on purpose: it is the lease's ledger (`debited` grows with consume(), is emptied by
    a refund).
    """

    target: Target
    debited: dict[str, int]  # milli per limit, net so far
    periods: dict[str, int | None]  # quota period each debit belongs to
    admissions: int
    bypass: bool
    #: concurrency limits: the ledger entry (core.hold_ledger) each limit's hold is on
    held: dict[str, str] = field(default_factory=dict)
    #: the sequence of the write that debited (a refund of a debit never kept names it)
    seq: int | None = None


PlanResult = tuple[dict[str, LimitWrite], int]  # limit writes, admissions delta
Planner = Callable[[Target, int], "PlanResult | None"]


# --- the acquire path's errors (the public boundary, `acquisition.py`, translates them) ---------


class RulesChanged(Exception):
    """An item's parent, cascade, flags or limits changed while we wrote: resolve again."""


class ShardGone(RulesChanged):
    """A shard other than 0 was found deleted: the bucket's layout must be read again."""


class Contended(Exception):
    """Writes kept meeting concurrent writers' effects until the rounds ran out."""


class ItemChanged(Exception):
    """A conditional write did not apply: `current` is the item as stored (None: no item)."""

    def __init__(self, current: BucketImage | None) -> None:
        super().__init__("condition failed")
        self.current = current


class Unavailable(Exception):
    """The table could not be reached or kept failing: nothing applied (but see `AnswerLost`).
    `denied`: the operation AWS refused, when that is why; `throttled`: the table throttled."""

    maybe_landed = False  # whether a write may have applied

    def __init__(
        self, cause: BaseException, *, denied: str | None = None, throttled: bool = False
    ) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.denied = denied
        self.throttled = throttled


class Overloaded(Unavailable):
    """The call could not be decided before its deadline given the writes already waiting on
    its items: answered at once, nothing sent (docs/on-unavailable.md "Overload")."""

    def __init__(self, wait_ms: float, left_ms: float) -> None:
        super().__init__(
            RuntimeError(
                f"its writes would take about {wait_ms:.0f} ms and "
                f"{max(left_ms, 0.0):.0f} ms are left"
            )
        )


class AnswerLost(Unavailable):
    """A write was sent and its answer lost (every time): it may or may not have applied."""

    maybe_landed = True

    def __init__(self, cause: BaseException) -> None:
        super().__init__(cause)
        self.args = (f"outcome unknown: {cause}",)


def failed_below(error: BaseException) -> BaseException:
    """What failed under an `Unavailable` (DynamoDB's or the transport's error), for messages;
    a lost answer, and anything else, as itself."""
    if isinstance(error, Unavailable) and not isinstance(error, AnswerLost):
        return error.cause
    return error
