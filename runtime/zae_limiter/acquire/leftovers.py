"""What `close()` left unresolved: one structured log line per bucket item (docs/on-unavailable.md).

`close()` waits for work resolved off callers' paths at most its bound; what is still in flight
or queued then is logged, once per item, at ERROR on the `zae_limiter` logger as
``close(): left unresolved <json>``, the JSON being:

- ``item``: ``<namespace id>/<entity>/<resource>/<shard>``; ``writer``: this writer's id;
- ``sequence``: the sequence of the write that was sent and not decided (None: nothing was sent
  undecided). It landed exactly when the item's attribute ``~<writer>`` holds that sequence;
- ``undo_if_landed``: consumption per limit (whole units) that write debited for callers that
  had left: if it landed, it is to be given back;
- ``apply_if_not_landed``: consumption per limit of the exit writes and refunds in that write:
  if it did not land, it is still to be applied (negative: given back);
- ``apply``: consumption per limit of exit writes and refunds never sent: still to be applied.

`zae_limiter.settle.settle` applies a line exactly once.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
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


@dataclass
class _Item:
    sequence: int | None = None
    undo_if_landed: Counter[str] = field(default_factory=Counter)
    apply_if_not_landed: Counter[str] = field(default_factory=Counter)
    apply: Counter[str] = field(default_factory=Counter)


class Leftovers:
    """One writer's leftovers, gathered while `close()` stops its lanes, then logged."""

    def __init__(self, writer: str) -> None:
        self.writer = writer
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
                    (item.apply_if_not_landed if sent else item.apply).update(_consumed(writes))
                elif sent:
                    item.undo_if_landed.update(_consumed(writes))
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
            item.apply.update(_consumed(planned[0]))

    def flush(self) -> int:
        """Log one line per item with something left; returns how many."""
        lines = 0
        for key, item in sorted(self._items.items()):
            line = _line(key, self.writer, item)
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


def _consumed(writes: dict[str, LimitWrite]) -> Counter[str]:
    return Counter({name: w.consumed for name, w in writes.items() if w.consumed})


def _units(amounts: Counter[str]) -> dict[str, int | float]:
    return {
        name: value // MILLI if value % MILLI == 0 else value / MILLI
        for name, value in sorted(amounts.items())
        if value
    }


def _line(key: Key, writer: str, item: _Item) -> dict[str, Any] | None:
    parts = {
        "undo_if_landed": _units(item.undo_if_landed),
        "apply_if_not_landed": _units(item.apply_if_not_landed),
        "apply": _units(item.apply),
    }
    if not any(parts.values()) and item.sequence is None:
        return None
    ns, entity, resource, shard = key
    return {
        "item": f"{ns}/{entity}/{resource}/{shard}",
        "writer": writer,
        "sequence": item.sequence,
        **parts,
    }
