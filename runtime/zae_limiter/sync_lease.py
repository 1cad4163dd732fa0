"""`SyncLease` and `SyncLeaseResource`: the blocking twins of `Lease` and `LeaseResource`."""

from __future__ import annotations

from typing import Any

from . import syncgen
from .acquire.lease import Lease, LeaseResource, NoopResource


class SyncLeaseResource:
    """One resource of a `SyncLease`."""

    _async: Any


class SyncLease:
    """What `SyncRateLimiter.acquire()` yields."""

    _async: Any


syncgen.twin(LeaseResource, SyncLeaseResource)
syncgen.twin(Lease, SyncLease)
syncgen.register_twin(NoopResource, SyncLeaseResource)
