"""`Scope`: the services of one namespace scope, handed to the layers that work on it.

A `Repository` builds one per namespace it serves (`Repository.scope`); the limiter, the lease,
feature gates, manifests, upgrades and the CLI take what they need from it instead of reaching
into the repository.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .acquire import Admission
from .acquire.load import Load
from .acquire.pending import Pending
from .caches import ImageCache, Turns
from .dynamo.store import Store
from .dynamo.transport import Transport
from .models import OnUnavailable
from .resolution import Resolver


@dataclass
class Shared:
    """What every namespace scope of one opened repository shares."""

    transport: Transport
    store: Store
    clock: Callable[[], int]
    images: ImageCache
    config_cache_ttl: float
    bucket_ttl_multiplier: int
    split_writes_per_second: float
    endpoint_url: str | None
    unmetered: str = "allow"  # the unmetered policy (unmetered.py)
    version_record: dict[str, Any] = field(default_factory=dict)
    table_id: str | None = None  # the version record's, when this repository was opened
    gates_passed: set[str] = field(default_factory=set)
    principal: str | None = None
    principal_resolved: bool = False
    partition_turns: Turns = field(default_factory=Turns)  # admin writes, one at a time
    acquire_timeout: float | None = 1.0  # the default deadline (acquire/deadlines.py)
    pending: Pending = field(default_factory=Pending)  # work resolved off callers' paths
    closed: bool = False
    load: Load = field(init=False)  # the writers' requests in flight (acquire/load.py)

    def __post_init__(self) -> None:
        self.load = Load.for_deadline(self.acquire_timeout)  # on the monotonic clock
        self.transport.on_throttle = self.load.throttled  # bucket writes are paced
        pending, load = self.pending.counters, self.load.counters
        self.transport.listeners.counters = lambda: (*pending(), *load())  # the request hook


@dataclass(frozen=True)
class Scope:
    """One namespace of one table: its store, clock, config resolver and bucket writes."""

    namespace_id: str
    store: Store
    clock: Callable[[], int]
    resolver: Resolver
    admission: Admission
    shared: Shared

    def unavailable_mode(self, explicit: OnUnavailable | None) -> OnUnavailable:
        """The call's mode, else the stored one (last good value, no I/O), else BLOCK."""
        if explicit is not None:
            return explicit
        system = self.resolver.cache.peek(("system",))
        mode = system.on_unavailable if system is not None else None
        return mode or self.resolver.last_on_unavailable or OnUnavailable.BLOCK
