"""One process's ledger of its concurrency holds (core.holds): which entry a write uses, what
each entry holds, when it is due for renewal, and which entries were lost.

Pure bookkeeping, no I/O: the acquire path asks it for a `Holder` before planning a write and
tells it what the write's returned image shows. An entry is lost for good once the holder's
clock passes its expiry or an image shows it removed; a lost entry is never written again (a
new generation takes its place), so a give-back can never subtract what another writer freed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from . import holds
from .hold_writes import Holder
from .holds import Hold


@dataclass
class Entry:
    """One of this process's entries on one item's concurrency limit."""

    key: str
    amount: int = 0  # milli held by this process's open leases there (writes that landed)
    expiry: int = 0  # the expiry its last landed write gave it (this process's clock)
    written_at: int = 0  # when that write was planned
    landed: bool = False  # a write that sets it landed (before: only a creating write may)
    lost: bool = False


Slot = tuple[Hashable, str]  # (item key, limit name)


class Ledger:
    """The entries of one writer (process); `skew_ms`: clock skew allowed between writers."""

    def __init__(self, writer: str, skew_ms: int) -> None:
        self.writer = writer
        self.skew_ms = skew_ms
        self.generation = 0
        self.entries: dict[Slot, dict[str, Entry]] = {}

    def _live(self, slot: Slot, now: int) -> list[Entry]:
        out = []
        for entry in self.entries.get(slot, {}).values():
            if entry.landed and not entry.lost and now >= entry.expiry:
                entry.lost = True  # lapsed on this clock: another writer may remove it soon
            if entry.landed and not entry.lost:
                out.append(entry)
        return out

    def holder(self, item: Hashable, limit: str, now: int, ttl_ms: int) -> Holder:
        """The entry a write at `now` adds to (the newest live one, else a new generation),
        and the other live entries it renews."""
        slot = (item, limit)
        live = self._live(slot, now)
        renew = tuple(e.key for e in live[:-1] if e.amount > 0)
        if live:
            return Holder(live[-1].key, False, now + ttl_ms, self.skew_ms, renew)
        self.generation += 1
        key = holds.entry_key(self.writer, self.generation)
        self.entries.setdefault(slot, {})[key] = Entry(key)
        return Holder(key, True, now + ttl_ms, self.skew_ms, renew)

    def giving_back(
        self, item: Hashable, limit: str, key: str, now: int, ttl_ms: int
    ) -> Holder | None:
        """The holder of a write that gives back a lease's hold on `key` (renewing this
        slot's other live entries); None when `key` no longer holds it (nothing to give)."""
        live = self._live((item, limit), now)
        if key not in {e.key for e in live}:
            return None
        renew = tuple(e.key for e in live if e.key != key and e.amount > 0)
        return Holder(key, False, now + ttl_ms, self.skew_ms, renew)

    def dropped(self, item: Hashable, limit: str, holder: Holder) -> None:
        """A write planned with `holder` did not land: a generation it would have created is
        forgotten."""
        entries = self.entries.get((item, limit), {})
        entry = entries.get(holder.key)
        if holder.create and entry is not None and not entry.landed:
            del entries[holder.key]

    def renewal(self, item: Hashable, limit: str, now: int, ttl_ms: int) -> Holder | None:
        """A holder that renews this slot's live entries holding something, when the last
        write to one of them is `ttl_ms / RENEW_DIVISOR` old; None when none is due."""
        live = [e for e in self._live((item, limit), now) if e.amount > 0]
        if not live or min(now - e.written_at for e in live) * holds.RENEW_DIVISOR < ttl_ms:
            return None
        keys = tuple(e.key for e in live)
        return Holder(keys[-1], False, now + ttl_ms, self.skew_ms, keys[:-1])

    def due(self, now: int, ttl_ms: dict[str, int]) -> list[Slot]:
        """Every slot with a renewal due at `now` (`ttl_ms`: lease_ttl per limit name)."""
        return [
            (item, limit)
            for item, limit in list(self.entries)
            if limit in ttl_ms and self.renewal(item, limit, now, ttl_ms[limit]) is not None
        ]

    def landed(
        self, item: Hashable, limit: str, holder: Holder, add: int, now: int, seen: tuple[Hold, ...]
    ) -> None:
        """A write planned at `now` with `holder`, adding `add`, landed; `seen`: the entries of
        the image it returned."""
        entries = self.entries.setdefault((item, limit), {})
        written = (holder.key, *holder.renew) if holder.key else holder.renew
        for key in written:
            entry = entries.setdefault(key, Entry(key))
            entry.landed, entry.expiry, entry.written_at = True, holder.expiry, now
        if holder.key:
            entries[holder.key].amount += add
        self.saw(item, limit, seen)

    def saw(self, item: Hashable, limit: str, seen: tuple[Hold, ...]) -> None:
        """An image of the item (returned by a write, or by a refused one): an entry of ours
        that landed and is not in it was removed (lost); entries lost and freed are dropped."""
        present = {h.key for h in seen}
        entries = self.entries.get((item, limit), {})
        for key, entry in list(entries.items()):
            if entry.landed and key not in present:
                entry.lost = True
                if entry.amount <= 0:
                    del entries[key]

    def holds(self, item: Hashable, limit: str, key: str, now: int) -> bool:
        """Whether `key` still holds what this process's leases took there (at `now`)."""
        entry = self.entries.get((item, limit), {}).get(key)
        return entry is not None and entry in self._live((item, limit), now)

    def forget(self, item: Hashable, limit: str, key: str, amount: int) -> None:
        """A lease whose entry was lost ended: its `amount` is no longer this process's."""
        entries = self.entries.get((item, limit), {})
        entry = entries.get(key)
        if entry is None:
            return
        entry.amount -= amount
        if entry.lost and entry.amount <= 0:
            del entries[key]
