"""In-process caches: resolved config (TTL) and bucket images (warm path and rejection cache),
and the bounded containers every other per-entity memory of a process uses (BoundedDict,
BoundedSet): however many entities a process meets, its memory stays bounded
(docs/performance.md "Memory").

The two caches are timed by the repository's injectable clock.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .core.images import BucketImage
from .models import CacheStats

T = TypeVar("T")


@dataclass
class _Entry(Generic[T]):
    value: T
    stored_at: int


#: Entries a config cache keeps at most (least recently used evicted): a process that meets
#: millions of entities keeps bounded memory; an evicted entry costs one read when next needed.
CONFIG_CACHE_MAX_ENTRIES = 50_000


class ConfigCache:
    """Resolved config per namespace scope, with a TTL (0 disables) and an LRU bound."""

    def __init__(self, ttl_seconds: float, max_entries: int = CONFIG_CACHE_MAX_ENTRIES) -> None:
        self.ttl_ms = int(ttl_seconds * 1000)
        self.ttl_seconds = ttl_seconds
        self.max_entries = max(max_entries, 1)
        self._entries: OrderedDict[tuple[Any, ...], _Entry[Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...], now: int) -> tuple[bool, Any]:
        """(found and fresh, value). A stale entry still returns its value with found=False."""
        entry = self._entries.get(key)
        if entry is None or self.ttl_ms <= 0:
            self.misses += 1
            return False, None if entry is None else entry.value
        if now - entry.stored_at >= self.ttl_ms:
            self.misses += 1
            return False, entry.value
        self.hits += 1
        self._entries.move_to_end(key)
        return True, entry.value

    def peek(self, key: tuple[Any, ...]) -> Any:
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def peek_fresh(self, key: tuple[Any, ...], now: int) -> tuple[bool, Any]:
        """(fresh, value) without counting a hit or a miss."""
        entry = self._entries.get(key)
        if entry is None or self.ttl_ms <= 0:
            return False, None
        return now - entry.stored_at < self.ttl_ms, entry.value

    def put(self, key: tuple[Any, ...], value: Any, now: int) -> None:
        self._entries[key] = _Entry(value, now)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def evict(self, predicate: Any) -> None:
        for key in [k for k in self._entries if predicate(k)]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


K = TypeVar("K")

#: Entries a per-bucket tracker (the split detector's write rates) or a warn-once set keeps at
#: most. Forgetting an entry costs little: a rate is measured again from the next write, a
#: warning may be logged again.
TRACKED_MAX_ENTRIES = 10_000


class BoundedDict(Generic[K, T]):
    """A mapping that keeps at most `max_entries` (the least recently set evicted first)."""

    def __init__(self, max_entries: int = TRACKED_MAX_ENTRIES) -> None:
        self.max_entries = max(max_entries, 1)
        self._entries: OrderedDict[K, T] = OrderedDict()

    def get(self, key: K) -> T | None:
        return self._entries.get(key)

    def __setitem__(self, key: K, value: T) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)


class BoundedSet(Generic[K]):
    """A set that keeps at most `max_entries` members (the oldest added evicted first)."""

    def __init__(self, max_entries: int = TRACKED_MAX_ENTRIES) -> None:
        self._members: BoundedDict[K, None] = BoundedDict(max_entries)

    def add(self, member: K) -> None:
        self._members[member] = None

    def __contains__(self, member: object) -> bool:
        return member in self._members

    def __len__(self) -> int:
        return len(self._members)


ImageKey = tuple[str, str, str, int]  # namespace id, entity, resource, shard


class ImageCache:
    """Last image seen of each bucket item (LRU).

    Every image serves the warm path (its stamp tells the write what to guard on). An image seen
    within `rejection_ttl_ms` may also reject a request locally: that is the rejection cache.
    """

    def __init__(self, rejection_ttl_seconds: float, size: int) -> None:
        self.rejection_ttl_ms = int(rejection_ttl_seconds * 1000)
        self.size = max(size, 1)
        self._images: OrderedDict[ImageKey, _Entry[BucketImage]] = OrderedDict()
        self._newest: dict[tuple[str, str, str], ImageKey] = {}  # newest stamp among shards
        self.local_rejections = 0

    @staticmethod
    def key_of(image: BucketImage) -> ImageKey:
        return (image.ns, image.entity_id, image.resource, image.shard)

    def get(self, key: ImageKey) -> tuple[BucketImage, int] | None:
        entry = self._images.get(key)
        if entry is None:
            return None
        self._images.move_to_end(key)
        return entry.value, entry.stored_at

    def put(self, image: BucketImage, now: int) -> None:
        key = self.key_of(image)
        current = self._images.get(key)
        if current is not None and current.value.stamp_seq > image.stamp_seq:
            return  # never go back to an older stamp
        self._images[key] = _Entry(image, now)
        self._images.move_to_end(key)
        bucket = key[:3]
        best = self._images.get(self._newest.get(bucket, key))
        if best is None or best.value.stamp_seq <= image.stamp_seq:
            self._newest[bucket] = key
        while len(self._images) > self.size:
            old_key, _ = self._images.popitem(last=False)
            if self._newest.get(old_key[:3]) == old_key:
                del self._newest[old_key[:3]]

    def newest(self, ns: str, entity_id: str, resource: str) -> tuple[BucketImage, int] | None:
        """The image with the newest stamp among a bucket's shards."""
        key = self._newest.get((ns, entity_id, resource))
        return None if key is None else self.get(key)

    def fresh_for_rejection(self, stored_at: int, now: int) -> bool:
        return self.rejection_ttl_ms > 0 and now - stored_at < self.rejection_ttl_ms

    def forget(self, ns: str, entity_id: str | None = None, resource: str | None = None) -> None:
        for key in list(self._images):
            if key[0] == ns and entity_id in (None, key[1]) and resource in (None, key[2]):
                del self._images[key]
                self._newest.pop(key[:3], None)

    def clear(self) -> None:
        self._images.clear()
        self._newest.clear()


def stats(
    config: ConfigCache, images: ImageCache, undecided_writes: int = 0, skewed_items: int = 0
) -> CacheStats:
    return CacheStats(
        hits=config.hits,
        misses=config.misses,
        size=len(config),
        ttl_seconds=config.ttl_seconds,
        local_rejections=images.local_rejections,
        undecided_writes=undecided_writes,
        skewed_items=skewed_items,
    )


class Turns:
    """One at a time per key, within this process (a lock per key, dropped when unused)."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)
