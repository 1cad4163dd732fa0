"""What `close()` left unresolved: one structured log line per bucket item (docs/on-unavailable.md).

`close()` waits for work resolved off callers' paths at most its bound; what is still in flight
or queued then is logged, once per item, at ERROR on the `zae_limiter` logger as
``close(): left unresolved <json>``, the JSON being:

- ``item``: ``<namespace id>/<entity>/<resource>/<shard>``; ``writer``: this writer's id;
- ``sequence``: the sequence of the write that was sent and not decided (None: nothing was sent
  undecided). It landed exactly when the item's evidence
  map ``ew`` holds that sequence for the writer;
- ``undo_if_landed``: consumption per limit (whole units) that write debited for callers that
  had left: if it landed, it is to be given back;
- ``apply_if_not_landed``: consumption per limit of the exit writes and refunds in that write:
  if it did not land, it is still to be applied (negative: given back);
- ``apply``: consumption per limit of exit writes and refunds never sent: still to be applied;
- ``admissions``: the admission count each of those three parts changes (``n``);
- ``periods``: the quota period each limit's amounts belong to (a give-back never lands in a
  later period);
- ``settle_sequence``: a sequence of this writer reserved for settling the line, so that
  `Repository.settle_left` applies it at most once.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.bucket import MILLI, LimitWrite
from ..core.evolve import evolve
from ..core.images import BucketImage
from .lane_calls import Batch, Call
from .values import Planner, Target

log = logging.getLogger("zae_limiter")
PREFIX = "close(): left unresolved "

Key = tuple[str, str, str, int]


PARTS = ("undo_if_landed", "apply_if_not_landed", "apply")


@dataclass
class _Item:
    sequence: int | None = None
    amounts: dict[str, Counter[str]] = field(
        default_factory=lambda: {part: Counter() for part in PARTS}
    )
    admissions: Counter[str] = field(default_factory=Counter)
    periods: dict[str, int] = field(default_factory=dict)

    def add(self, part: str, writes: dict[str, LimitWrite], admissions: int) -> None:
        for name, write in writes.items():
            if write.consumed:
                self.amounts[part][name] += write.consumed
                if write.result.w is not None:
                    self.periods[name] = write.result.w
        self.admissions[part] += admissions


class Leftovers:
    """One writer's leftovers, gathered while `close()` stops its lanes, then logged."""

    def __init__(self, writer: str, next_seq: Callable[[], int]) -> None:
        self.writer = writer
        self.next_seq = next_seq
        self._items: dict[Key, _Item] = {}

    def lane(
        self, key: Key, batch: Batch | None, queued: list[Call], image: BucketImage | None
    ) -> None:
        """A lane's batch in flight (None: none) and its queued exit writes and refunds."""
        item = self._items.setdefault(key, _Item())
        if batch is not None:
            sent = batch.first_sent is not None
            if sent:
                item.sequence = batch.evidence.seq
            for call, writes in zip(batch.calls, batch.plans, strict=True):
                if call.settle:
                    item.add("apply_if_not_landed" if sent else "apply", writes, call.admissions)
                elif sent:
                    item.add("undo_if_landed", writes, call.admissions)
        for call in queued:
            if image is not None:
                self._planned(item, call.target, call.planner, image)

    def unsent(self, key: Key, target: Target, planner: Planner, now: int) -> None:
        """An exit write or refund asked for after the lanes closed."""
        self._planned(self._items.setdefault(key, _Item()), target, planner, target.image, now)

    def _planned(
        self,
        item: _Item,
        target: Target,
        planner: Planner,
        image: BucketImage,
        now: int | None = None,
    ) -> None:
        on = target if target.image is image else evolve(target, image=image)
        planned = planner(on, image.written_at if now is None else now)
        if planned is not None:
            item.add("apply", *planned)

    def flush(self) -> int:
        """Log one line per item with something left; returns how many."""
        lines = 0
        for key, item in sorted(self._items.items()):
            line = _line(key, self.writer, item, self.next_seq)
            if line is None:
                continue
            lines += 1
            log.error("%s%s", PREFIX, json.dumps(line, sort_keys=True), extra={"left": line})
        self._items.clear()
        return lines


def parse(message: str) -> dict[str, Any]:
    """The JSON of a ``close(): left unresolved`` log line (the message, or any text ending
    with it)."""
    return dict(json.loads(message[message.index(PREFIX) + len(PREFIX) :]))


def _units(amounts: Counter[str]) -> dict[str, int | float]:
    return {
        name: value // MILLI if value % MILLI == 0 else value / MILLI
        for name, value in sorted(amounts.items())
        if value
    }


def _line(key: Key, writer: str, item: _Item, next_seq: Callable[[], int]) -> dict[str, Any] | None:
    parts = {part: _units(item.amounts[part]) for part in PARTS}
    admissions = {part: n for part, n in item.admissions.items() if n}
    if not any(parts.values()) and not admissions and item.sequence is None:
        return None
    ns, entity, resource, shard = key
    return {
        "item": f"{ns}/{entity}/{resource}/{shard}",
        "writer": writer,
        "sequence": item.sequence,
        **parts,
        "admissions": admissions,
        "periods": dict(sorted(item.periods.items())),
        "settle_sequence": next_seq(),
    }
