"""What a lane works with: its calls, their outcomes, the batches it sends (acquire/lanes.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..core.bounds import RESEND_BOUND_MS
from ..core.bucket import LimitWrite
from ..core.images import BucketImage, Evidence
from .values import Planner, Target

#: Calls folded into one write at most.
MAX_BATCH = 64
#: Re-sends of a write whose answer was lost before its calls are told "unavailable".
UNKNOWN_RESENDS = 8
#: Why a write is undecided when the item no longer holds its writer's entry.
ENTRY_REMOVED = (
    "other writers removed this writer's entry from the item before the outcome was known "
    "(the item's floor blocks any copy of the write)"
)


class Sender(Protocol):
    async def send(
        self,
        image: BucketImage,
        exists: bool,
        writes: dict[str, LimitWrite],
        admissions: int,
        evidence: Evidence,
        now: int,
        revokes: tuple[int, ...],
    ) -> BucketImage:
        """One bucket write (an update of `image`, or its creation when not `exists`);
        `revokes`: sequences of this writer's debits it refunds."""
        ...

    async def fence(self, image: BucketImage, evidence: Evidence, blocked: int) -> BucketImage:
        """Move this writer's entry to `evidence.seq` unless sequence `blocked` landed."""
        ...

    async def read(self, image: BucketImage) -> BucketImage | None:
        """`image`'s item as stored now (strongly consistent; None: no item)."""
        ...


@dataclass
class Call:
    """One job of `write_all` on one item: its planner and how it ended."""

    target: Target
    planner: Planner
    settle: bool  # an exit write or refund: transient failures are retried longer
    rounds: int  # failed conditions (`conflicts`) allowed, and tries after transient errors
    future: asyncio.Future[Outcome]
    revokes: int | None = None  # a refund: the sequence of the debit it undoes (docs/alerts.md)
    now: int | None = None  # fixed after a conflict: the retry plans at the same time
    tries: int = 0
    conflicts: int = 0  # failed conditions met: a debit is contended after `rounds` of them
    admissions: int = 0  # the admissions delta of its planned write
    deadline: float | None = None  # Load ms: a throttled debit is tried again only before it
    turned: bool = False  # a debit sent after its turn of the paced table (lane_load.reserved)

    def in_time(self, decided_at: float) -> bool:
        """Whether a decision at `decided_at` (clock ms) is before the call's deadline."""
        return self.deadline is not None and decided_at < self.deadline

    def resolve(self, outcome: Outcome, on_orphan: Callable[[Call, Outcome], None] | None) -> None:
        """Tell the caller; a caller that left (its future cancelled) is never told, and a write
        that landed for it is handed to `on_orphan` (a debit to refund)."""
        if not self.future.done():
            self.future.set_result(outcome)
        elif outcome.image is not None and on_orphan is not None:
            on_orphan(self, outcome)


@dataclass(frozen=True)
class Outcome:
    """`image`, `writes` and `seq` (its write's sequence) when the call's write landed;
    `refused` when its planner refused on a fresh image (`at`: the time it was judged at); else
    `error`."""

    target: Target
    image: BucketImage | None = None
    writes: dict[str, LimitWrite] = field(default_factory=dict)
    refused: bool = False
    error: BaseException | None = None
    at: int | None = None
    seq: int | None = None


@dataclass
class Batch:
    """Calls folded into one write of one item, and what its sends have learnt."""

    calls: list[Call]
    plans: list[dict[str, LimitWrite]]
    image: BucketImage
    exists: bool
    writes: dict[str, LimitWrite]
    admissions: int
    evidence: Evidence
    now: int
    lost: int = 0  # answers lost so far (the write may have landed)
    skewed: bool = False  # the item shows a writer too far ahead: a lost answer is not re-sent
    revokes: tuple[int, ...] = ()  # its refunds' debits (Call.revokes)
    first_sent: int | None = None  # the clock when it was first sent (bounds the re-sends)

    @property
    def resendable(self) -> bool:
        """A lost answer may be re-sent: the write carries its writer's entry, and the item
        shows no writer's clock too far ahead."""
        return self.evidence.kept and not self.skewed

    def resend_allowed(self, now: int) -> bool:
        """Another send of a write whose answer was lost: bounded in count and in time."""
        started = self.first_sent if self.first_sent is not None else now
        return self.lost <= UNKNOWN_RESENDS and now - started <= RESEND_BOUND_MS


class Undecided(Exception):
    """A write's outcome could not be decided: it may or may not have landed."""


class Closed(Exception):
    """The repository was closed: nothing more is sent."""

    def __init__(self) -> None:
        super().__init__("the repository is closed")
