"""A held crossing's state and what one record of its item does to it (`step`). Pure: the
rules are `alerts.held`'s (its module docstring); this module holds the state, its item form, and
the judgement of a record, with no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.bounds import ASSUMED_SKEW_MS
from ..core.bucket import Kind
from ..core.images import BucketImage
from ..dynamo import bucket_items, keys
from .detect import use_of
from .event import Crossing

Bucket = tuple[str, str, str, int]
#: The width of a stored stream position (DynamoDB's sequence numbers have 21 to 40 digits).
POSITION_WIDTH = 40


@dataclass(frozen=True)
class Held:
    """One held crossing: where, until when, the bucket's write count last seen, the stream
    position that wrote it, and the evidence of the write it reports (module docstring)."""

    crossing: Crossing
    shard: int
    until: int  # the aggregator may confirm it from then (epoch ms)
    seen: int  # the bucket item's write counter `k` in the last record read
    writer: str  # whose write crossed (for the log)
    seq: int
    at: str = ""  # the record whose processing wrote this state ("": before positions)
    marks: dict[str, int] = field(default_factory=dict)  # the reported write's evidence
    floor: int = 0  # and its evidence floor

    @property
    def bucket(self) -> Bucket:
        c = self.crossing
        return (c.ns, c.entity_id, c.resource, self.shard)

    @property
    def key(self) -> dict[str, str]:
        c = self.crossing
        return keys.held_crossing(c.ns, c.entity_id, self.shard, c.key["SK"])

    def item(self) -> dict[str, Any]:
        c = self.crossing
        return {
            **self.key,
            "ns": c.ns,
            "entity_id": c.entity_id,
            "resource": c.resource,
            "limit_name": c.limit,
            "threshold": c.threshold,
            "period_ms": c.period_ms,
            "crossed_ms": c.crossed_ms,
            "used_milli": c.used_milli,
            "capacity_milli": c.capacity_milli,
            "soft": c.soft,
            "rearm": c.rearm,
            "shard": self.shard,
            "until": self.until,
            "seen": self.seen,
            "writer": self.writer,
            "seq": self.seq,
            "at": self.at,
            "marks": dict(self.marks),
            "floor": self.floor,
            "ttl": self.until // 1000 + 86_400,
        }

    def ended(self, at: str, why: str, when: int) -> dict[str, Any]:
        """Its item once dropped or confirmed at the record at `at` (kept until its TTL, so that
        a late write planned before cannot hold it again)."""
        return {**self.key, "at": at, "ended": why, "ttl": max(self.until, when) // 1000 + 86_400}


def stream_position(sequence_number: str) -> str:
    """A stream record's sequence number as a stored position (ordered as text)."""
    return sequence_number.rjust(POSITION_WIDTH, "0")


def held_of(item: dict[str, Any]) -> Held | None:
    """The held crossing an item stores; None for an ended one."""
    if "ended" in item:
        return None
    crossing = Crossing(
        ns=str(item["ns"]),
        entity_id=str(item["entity_id"]),
        resource=str(item["resource"]),
        limit=str(item["limit_name"]),
        threshold=int(item["threshold"]),
        period_ms=int(item["period_ms"]),
        crossed_ms=int(item["crossed_ms"]),
        used_milli=int(item["used_milli"]),
        capacity_milli=int(item["capacity_milli"]),
        soft=bool(item["soft"]),
        rearm=int(item.get("rearm", 0)),
    )
    return Held(
        crossing,
        int(item["shard"]),
        int(item["until"]),
        int(item["seen"]),
        str(item.get("writer", "")),
        int(item.get("seq", 0)),
        str(item.get("at", "")),
        {str(w): int(s) for w, s in dict(item.get("marks", {})).items()},
        int(item.get("floor", 0)),
    )


class Disposition(enum.Enum):
    """What one record of its item does to a held crossing (`step`)."""

    KEEP = "keep"  # nothing to write
    WRITE = "write"  # its item changes
    DROP = "drop"  # a refund took it back
    CONFIRM = "confirm"  # no refund can take it back any more: store the alert


def step(
    h: Held,
    image: BucketImage,
    refund: tuple[str, tuple[int, ...]] | None,
    hold_ms: int,
    at: str,
) -> tuple[Disposition, Held]:
    """What the record at `at` whose new image is `image` (a refund of never-kept debits:
    `refund`, its writer and their sequences) does to `h`, and `h` after it. Pure."""
    if refund is not None:
        left = judged(h, image, refund)
        if left is None:
            return Disposition.DROP, h
        h = replace(left, until=max(h.until, image.written_at + hold_ms))
    if image.written_at >= h.until + ASSUMED_SKEW_MS:
        return Disposition.CONFIRM, h
    if h.seen != image.writes or refund is not None:
        return Disposition.WRITE, replace(h, seen=image.writes, at=at)
    return Disposition.KEEP, h


def judged(h: Held, image: BucketImage, refund: tuple[str, tuple[int, ...]]) -> Held | None:
    """`h` as a refund (its new image, its writer and the sequences it revokes) leaves it: None
    below the held threshold in the same quota period (dropped); else held, reported at the
    refund when the write it reported held one of the refunded debits (module docstring)."""
    c = h.crossing
    params = image.stamp.params(c.limit)
    state = image.states.get(c.limit)
    if params is None or state is None:
        return None  # the limit is gone: nothing stays to alert on
    used, cap, period = use_of(params, state, image)
    if params.kind in (Kind.CALENDAR, Kind.SESSION) and period != c.period_ms:
        return h  # a later period: the refund cannot reach the crossing's
    if cap <= 0 or used * 100 < c.threshold * cap:
        return None
    writer, sequences = refund
    entry = h.marks.get(writer)
    if not any(seq <= (h.floor if entry is None else entry) for seq in sequences):
        return h  # only debits after the reported write: its level stands
    capacity = params.scheduled(image.written_at).capacity
    at_refund = replace(
        c, crossed_ms=image.written_at, used_milli=used * capacity // cap, capacity_milli=capacity
    )
    return replace(h, crossing=at_refund, marks=dict(image.evidence), floor=image.floor)


def writer_of(image: BucketImage, old_raw: dict[str, Any] | None) -> tuple[str, int]:
    """The writer whose entry this write set, and its sequence ("", 0 for an admin write)."""
    old = {} if old_raw is None else bucket_items.parse(old_raw).evidence
    for writer, seq in image.evidence.items():
        if old.get(writer) != seq:
            return writer, seq
    return "", 0
