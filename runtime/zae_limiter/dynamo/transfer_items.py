"""Transfer bookkeeping on bucket items (regional shards, docs/multi-region.md): its stored form.

Pure: parses and builds attribute values, sends nothing. The requests that give and take are
`bucket_moves`'s.
"""

from __future__ import annotations

from typing import Any

from ..core.images import Outgoing
from .bucket_attributes import INCOMING, OUTGOING, TRANSFERS


def transfers_of(item: dict[str, Any]) -> dict[str, Any]:
    """An item's transfer bookkeeping (`image_of` reads it only where ``xs`` is)."""
    outgoing = {}
    for n, name in enumerate(OUTGOING):
        raw = item.get(name)
        if raw:
            outgoing[n] = Outgoing(
                n,
                int(raw["q"]),
                {k: int(v) for k, v in raw["a"].items()},
                {k: (None if v < 0 else int(v)) for k, v in raw["p"].items()},
                int(raw["t"]),
            )
    incoming = {n: int(item[name]) for n, name in enumerate(INCOMING) if name in item}
    return {"outgoing": outgoing, "incoming": incoming, "transfers": int(item[TRANSFERS])}


def outgoing_item(record: Outgoing) -> dict[str, Any]:
    """The stored form of a transfer given (an ``xo<n>``; a dripping limit's period is -1)."""
    return {
        "q": record.seq,
        "a": dict(record.amounts),
        "p": {k: (-1 if v is None else v) for k, v in record.periods.items()},
        "t": record.at,
    }
