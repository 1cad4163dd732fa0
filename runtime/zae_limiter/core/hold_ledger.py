"""One process's ledger of its concurrency holds (core.holds): which entry a write uses, what
each entry holds, when it is due for renewal, and which entries were lost.

Pure bookkeeping, no I/O: the acquire path asks it for a `Holder` before planning a write and
tells it what the write's returned image shows. An entry is lost for good once the holder's
clock passes its expiry or an image shows it removed; a lost entry is never written again (a
new generation takes its place), so a give-back can never subtract what another writer freed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from . import holds
from .hold_writes import Holder
from .holds import Hold, HoldWrite, Outlook


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
NONE: frozenset[str] = frozenset()
QUIET_NONE: frozenset[Hold] = frozenset()
#: How many of this process's recent hold durations per item a refusal's wait is judged from.
RECENT_HOLDS = 16


class Ledger:
    """The entries of one writer (process); `skew_ms`: clock skew allowed between writers."""

    def __init__(self, writer: str, skew_ms: int) -> None:
        self.writer = writer
        self.prefix = holds.entry_key(writer, 0)[:-1]  # every entry of this writer starts so
        self.skew_ms = skew_ms
        self.generation = 0
        self.entries: dict[Slot, dict[str, Entry]] = {}
        #: others' entries as last seen, (key, amount, expiry) -> when first seen so
        self.seen: dict[Slot, dict[tuple[str, int, int], int]] = {}
        self.ttls: dict[Slot, int] = {}  # each slot's lease_ttl (ms), as last planned
        #: how long this process's recent holds on each slot lasted (ms), newest last
        self.lasted: dict[Slot, deque[int]] = {}
        #: told (entry, expiry) of every entry a landed write set (a history's log)
        self.on_written: Callable[[str, int], None] | None = None
        #: told (planned at, received at, keys present) of every landed write (a history's log)
        self.on_landed: Callable[[int, int, list[str]], None] | None = None
        #: told when an image shows an entry of this writer removed (leases waiting on a loss)
        self.on_removed: Callable[[], None] | None = None

    def _live(self, slot: Slot, now: int) -> list[Entry]:
        out = []
        for entry in self.entries.get(slot, {}).values():
            if entry.landed and not entry.lost and now >= entry.expiry:
                entry.lost = True  # lapsed on this clock: another writer may remove it soon
            if entry.landed and not entry.lost:
                out.append(entry)
        return out

    def quiet(self, slot: Slot, now: int, ttl_ms: int) -> frozenset[Hold]:
        """Others' entries a write may remove: exactly as seen unchanged since more than
        `ttl_ms` before `now` (a later image showing one renewed does not make it quiet)."""
        seen = self.seen.get(slot)
        if not seen:
            return QUIET_NONE  # the warm path: nobody else holds here
        return frozenset(Hold(*entry) for entry, at in seen.items() if now - at > ttl_ms)

    def _holder(
        self, slot: Slot, key: str, create: bool, now: int, ttl_ms: int, renew: tuple[str, ...]
    ) -> Holder:
        """A holder that may also remove others' quiet entries and this writer's own lapsed
        ones (their leases were told)."""
        lapsed = [e.key for e in self.entries.get(slot, {}).values() if e.lost]
        quiet = self.quiet(slot, now, ttl_ms)
        mine = frozenset(lapsed) if lapsed else NONE
        return Holder(key, create, now + ttl_ms, self.skew_ms, renew, quiet, mine)

    def holder(self, item: Hashable, limit: str, now: int, ttl_ms: int) -> Holder:
        """The entry a write at `now` adds to (the newest live one, else a new generation),
        and the other live entries it renews."""
        slot = (item, limit)
        self.ttls[slot] = ttl_ms
        live = self._live(slot, now)
        renew = tuple(e.key for e in live[:-1] if e.amount > 0)
        if live:
            return self._holder(slot, live[-1].key, False, now, ttl_ms, renew)
        entries = self.entries.setdefault(slot, {})
        pending = [e.key for e in entries.values() if not e.landed and not e.lost]
        if pending:  # a generation planned and not (yet) written: the lane writes one at a time
            key = pending[-1]
        else:
            self.generation += 1
            key = holds.entry_key(self.writer, self.generation)
            entries[key] = Entry(key)
        return self._holder(slot, key, True, now, ttl_ms, renew)

    def giving_back(
        self, item: Hashable, limit: str, key: str, now: int, ttl_ms: int
    ) -> Holder | None:
        """The holder of a write that gives back a lease's hold on `key` (renewing this
        slot's other live entries); None when `key` no longer holds it (nothing to give)."""
        live = self._live((item, limit), now)
        if key not in {e.key for e in live}:
            return None
        renew = tuple(e.key for e in live if e.key != key and e.amount > 0)
        return self._holder((item, limit), key, False, now, ttl_ms, renew)

    def reaping(self, item: Hashable, limit: str, now: int, ttl_ms: int) -> Holder | None:
        """A holder whose write only removes this writer's lapsed entries on the slot (a lease
        that outlived its hold, through an outage, gives it back if no other writer freed it
        first); None when it has none."""
        slot = (item, limit)
        if not any(e.lost for e in self.entries.get(slot, {}).values()):
            return None
        return self._holder(slot, "", True, now, ttl_ms, ())

    def dropped(self, item: Hashable, limit: str, key: str) -> None:
        """A write that would have created `key` may have landed unseen (its answer was lost):
        that generation is never written again (a new one takes its place)."""
        entries = self.entries.get((item, limit), {})
        entry = entries.get(key)
        if entry is not None and not entry.landed:
            del entries[key]

    def renewal(self, item: Hashable, limit: str, now: int, ttl_ms: int) -> Holder | None:
        """A holder that renews this slot's live entries holding something, when the last
        write to one of them is `ttl_ms / RENEW_DIVISOR` old; None when none is due."""
        live = [e for e in self._live((item, limit), now) if e.amount > 0]
        if not live or max(now - e.written_at for e in live) * holds.RENEW_DIVISOR < ttl_ms:
            return None  # the oldest write to them is not yet lease_ttl / 3 old
        keys = tuple(e.key for e in live)
        return self._holder((item, limit), keys[-1], False, now, ttl_ms, keys[:-1])

    def due(self, now: int) -> list[Slot]:
        """Every slot with a renewal due at `now`."""
        return [
            (item, limit)
            for item, limit in list(self.entries)
            if self.renewal(item, limit, now, self.ttls.get((item, limit), 0)) is not None
        ]

    def holding(self) -> bool:
        """Whether any entry holds something for an open lease (renewals must go on)."""
        return any(
            e.amount > 0 and not e.lost for slot in self.entries.values() for e in slot.values()
        )

    def next_expiry(self, now: int) -> int | None:
        """The earliest expiry after `now` among the entries that hold something: when a hold
        can next be lost by lapsing (None: nothing held can lapse later; one whose expiry
        passed already counts as lost)."""
        return min(
            (
                e.expiry
                for slot in self.entries.values()
                for e in slot.values()
                if e.landed and not e.lost and e.amount > 0 and e.expiry > now
            ),
            default=None,
        )

    def shortest_ttl(self) -> int:
        """The shortest lease_ttl (ms) among slots that hold something (0: none)."""
        ttls = [
            self.ttls.get(slot, 0)
            for slot, entries in self.entries.items()
            if any(e.amount > 0 for e in entries.values())
        ]
        return min(ttls, default=0)

    def landed(
        self,
        item: Hashable,
        limit: str,
        change: HoldWrite,
        now: int,
        seen: tuple[Hold, ...],
        received_at: int,
    ) -> None:
        """A write planned at `now` making `change` landed; `seen`: the entries of the image it
        returned, received at `received_at`."""
        entries = self.entries.setdefault((item, limit), {})
        if change.drop:  # removed: nothing of it is left to give back
            entries.pop(change.key, None)
        written = (change.key, *change.renew) if change.key and not change.drop else change.renew
        for key in written:
            entry = entries.setdefault(key, Entry(key))
            entry.landed, entry.expiry, entry.written_at = True, change.expiry, now
            if self.on_written is not None:
                self.on_written(key, change.expiry)
        if change.key and not change.drop:
            entries[change.key].amount += change.add
        if self.on_landed is not None:
            self.on_landed(now, received_at, [h.key for h in seen])
        self.saw(item, limit, seen, received_at)

    def saw(self, item: Hashable, limit: str, seen: tuple[Hold, ...], received_at: int) -> None:
        """An image of the item returned by a write (landed or refused), received at
        `received_at`: an entry of ours that landed and is not in it was removed (lost), and
        others' entries are timed from when they were first seen as they are."""
        present = {h.key for h in seen}
        slot = (item, limit)
        before = self.seen.get(slot, {})
        others = [h for h in seen if not h.key.startswith(self.prefix)]
        if others or before:
            self.seen[slot] = {
                (h.key, h.amount, h.expiry): before.get((h.key, h.amount, h.expiry), received_at)
                for h in others
            }
        entries = self.entries.get(slot, {})
        removed = False
        for key, entry in list(entries.items()):
            if entry.landed and key not in present:
                del entries[key]  # removed: lost, and nothing of it is left to give back
                removed = True
        if removed and self.on_removed is not None:
            self.on_removed()

    def held_for(self, item: Hashable, limit: str, ms: int) -> None:
        """A lease of this process held `limit` on `item` for `ms` (admission to exit)."""
        recent = self.lasted.get((item, limit))
        if recent is None:
            recent = self.lasted[item, limit] = deque(maxlen=RECENT_HOLDS)
        recent.append(ms)

    def outlook(self, item: Hashable, limit: str, ttl_ms: int) -> Outlook:
        """What this process knows of the slot for the wait a refusal reports (core.holds):
        the median of its recent hold durations there, its sightings, its entries."""
        slot = (item, limit)
        recent = sorted(self.lasted.get(slot, ()))
        seen = {Hold(*entry): at for entry, at in self.seen.get(slot, {}).items()}
        lapsed = frozenset(e.key for e in self.entries.get(slot, {}).values() if e.lost)
        lasting = recent[len(recent) // 2] if recent else None
        return Outlook(self.skew_ms, ttl_ms, lasting, seen, self.prefix, lapsed)

    def sighted(self, item: Hashable, limit: str, seen: tuple[Hold, ...], at: int) -> None:
        """Others' entries in an image this writer judged a refusal on (read, or kept): each
        timed from `at` unless already seen exactly so (it was written before `at`, so its
        quiet time may start there). Nothing else changes: the image may be older than this
        writer's own latest write."""
        others = [h for h in seen if not h.key.startswith(self.prefix)]
        if others:
            known = self.seen.setdefault((item, limit), {})
            for h in others:
                known.setdefault((h.key, h.amount, h.expiry), at)

    def holds(self, item: Hashable, limit: str, key: str, now: int) -> bool:
        """Whether `key` still holds what this process's leases took there (at `now`)."""
        entry = self.entries.get((item, limit), {}).get(key)
        return entry is not None and entry in self._live((item, limit), now)

    def amount(self, item: Hashable, limit: str, key: str) -> int:
        """What this process's leases hold on `key` (milli), as far as it knows."""
        entry = self.entries.get((item, limit), {}).get(key)
        return 0 if entry is None else entry.amount

    def forget(
        self, item: Hashable, limit: str, key: str, amount: int, *, on_item: bool = False
    ) -> None:
        """A lease whose entry was lost ended: its `amount` is no longer this process's. The
        lost entry is dropped once it holds nothing of this process's, unless `on_item` (the
        image planned on still shows it): then it stays lapsed, so that every write of this
        process to the slot removes it, a give-back planned again after its write failed
        included, until an image shows it gone (`saw`)."""
        entries = self.entries.get((item, limit), {})
        entry = entries.get(key)
        if entry is None:
            return
        entry.amount = max(0, entry.amount - amount)
        if entry.lost and entry.amount == 0 and not on_item:
            del entries[key]
