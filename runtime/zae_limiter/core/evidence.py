"""Writer evidence on a bucket item: which entries a write keeps, removes and relies on, and what
an item tells a writer about a write whose answer was lost (docs/on-unavailable.md, "Exactly
once, with any number of writers" and "A fleet of writers").

Pure: no I/O. An item holds at most one entry per writer (its id -> the sequence of its last
write that landed there), and a *floor*: every entry ever removed held at most the floor. A
write with sequence `s` applies only while its writer's entry is below `s`, or absent with the
floor below `s`; so once a write has landed, no copy of it can land again, whoever removes its
entry and whenever. Entries are removed:

- by age, older than `PRUNE_AGE_MS` (by the remover's clock), by any write;
- to make room: an item keeps at most `MAX_ENTRIES`; a writer that would add its entry to a
  full item first removes the oldest entries older than `EVICT_AGE_MS`;
- never otherwise. A writer that finds the item full of entries younger than that writes
  without evidence (`Evidence.kept` False): such a write is never sent twice.

Every removal raises the floor to the largest value removed. What a writer can still decide:
its entry shows the write's sequence (landed) or below it, or is absent under a floor below it
(not landed); absent under a floor at or above it, its entry was removed and nothing tells
(`UNKNOWN`).
"""

from __future__ import annotations

import enum

from .images import BucketImage, Evidence

#: Entries an item keeps: a write that would add one more first removes old ones. With the
#: removals a write may make on the way, an item never holds more than
#: MAX_ENTRIES + MAX_REMOVED entries (17 bytes each: under 1 KB of evidence).
MAX_ENTRIES = 40
#: Entries one write removes at most (keeps the request small).
MAX_REMOVED = 16
#: Free places a write that has to make room leaves for the writers after it (so that not
#: every new writer removes one entry, each raising the floor).
ROOM_LEFT = 8
#: An entry younger than this is never removed to make room: its writer may still be deciding
#: a lost answer (the default client's re-send comes after its 5 s read timeout).
EVICT_AGE_MS = 10_000
#: Any entry older than this is removed by the next write. Not needed for exactness (the floor
#: is): it bounds how long an idle writer's entry costs bytes on an item with few writers, and
#: outlasts the longest resolution of a lost answer (`core.bounds.resolution_bound_s`) plus the
#: clock skew assumed, so on such an item every lost answer is decided.
PRUNE_AGE_MS = 5 * 60_000


class Decided(enum.Enum):
    """What an item says about a write whose answer was lost."""

    LANDED = "landed"
    NOT_LANDED = "not landed"  # and it cannot land while the entry or the floor stays below it
    UNKNOWN = "unknown"  # its entry was removed: it may have landed; no copy can land now


def decide(image: BucketImage, writer: str, seq: int) -> Decided:
    """Whether `writer`'s write with sequence `seq` had landed on the item `image` shows."""
    entry = image.evidence.get(writer)
    if entry is not None:
        return Decided.LANDED if entry >= seq else Decided.NOT_LANDED
    return Decided.NOT_LANDED if image.floor < seq else Decided.UNKNOWN


def next_seq(last: int, now: int, image: BucketImage) -> int:
    """A writer's next sequence: above its last one, about its clock, above the item's floor
    (an entry it adds must be above it)."""
    return max(last + 1, now, image.floor + 1)


def plan(image: BucketImage, writer: str, seq: int, now: int, *, skewed: bool) -> Evidence:
    """The evidence of `writer`'s write `seq` at `now` on `image`: the entries it removes, the
    floor it leaves, the item size its entry needs; `skewed`: the item shows a writer's clock
    far ahead of this one (remove nothing, docs/on-unavailable.md)."""
    entries = image.evidence
    mine = writer in entries
    if skewed or (
        len(entries) < MAX_ENTRIES
        and not image.legacy
        and (not entries or min(entries.values()) >= now - PRUNE_AGE_MS)
    ):  # the warm path (or an item this writer must not prune): nothing to remove
        return Evidence(writer, seq, limit=MAX_ENTRIES, kept=mine or len(entries) < MAX_ENTRIES)
    others = sorted((value, name) for name, value in entries.items() if name != writer)
    old = [name for value, name in others if value < now - PRUNE_AGE_MS][:MAX_REMOVED]
    count = len(entries) - len(old) + (0 if mine else 1)
    removed = list(old)
    if count > MAX_ENTRIES:  # make room: the oldest entries past the eviction age
        wanted = count - (MAX_ENTRIES - ROOM_LEFT)
        gone = set(old)
        evictable = [n for v, n in others if n not in gone and v < now - EVICT_AGE_MS]
        removed += evictable[: min(wanted, MAX_REMOVED - len(removed))]
        count = len(entries) - len(removed) + (0 if mine else 1)
    if not mine and count > MAX_ENTRIES:
        return Evidence(writer, seq, kept=False)  # full of young entries: no entry, no re-send
    legacy = tuple(
        (name, value) for name, value in image.legacy.items() if value < now - PRUNE_AGE_MS
    )[:MAX_REMOVED]
    cut = max((entries[name] for name in removed), default=0)
    return Evidence(
        writer,
        seq,
        prune=tuple(removed),
        cut=max(cut, image.floor) if removed else 0,
        legacy=legacy,
        limit=MAX_ENTRIES + len(removed),
    )
