"""`SyncRateLimiter` and `SyncRepository`: the blocking facade, generated from the async API.

Safe to share between threads. Use from plain synchronous code (a Lambda handler, a thread
pool); never from inside a running event loop of your own — use the async API there.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from . import syncgen
from .acquire.acquisition import Acquisition
from .limiter import RateLimiter
from .repository import Repository
from .sync_lease import SyncLease, SyncLeaseResource


class SyncRepository:
    """Blocking twin of `Repository`: `SyncRepository.open(...)`."""

    _async: Repository

    def __enter__(self) -> SyncRepository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]


class SyncAcquisition:
    def __init__(self, acquisition: Acquisition) -> None:
        self._async = acquisition

    def __enter__(self) -> SyncLease:
        lease: SyncLease = syncgen.wrap(syncgen.run(self._async.__aenter__()))
        return lease

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        syncgen.run(self._async.__aexit__(exc_type, exc, tb))


class SyncRateLimiter:
    """Blocking twin of `RateLimiter`: `with limiter.acquire(...) as lease:`."""

    _async: RateLimiter

    def __init__(self, repository: SyncRepository) -> None:
        self._async = RateLimiter(syncgen.async_of(repository))

    def __enter__(self) -> SyncRateLimiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # type: ignore[attr-defined]

    @property
    def repository(self) -> SyncRepository:
        repo: SyncRepository = syncgen.wrap(self._async.repository)
        return repo

    def acquire(self, *args: Any, **kwargs: Any) -> SyncAcquisition:
        return SyncAcquisition(self._async.acquire(*args, **kwargs))


SyncRateLimiter.acquire.__signature__ = syncgen.inspect.signature(RateLimiter.acquire)  # type: ignore[attr-defined]
SyncRateLimiter.acquire.__doc__ = RateLimiter.acquire.__doc__
syncgen.twin(Repository, SyncRepository)
syncgen.twin(RateLimiter, SyncRateLimiter)

__all__ = ["SyncLease", "SyncLeaseResource", "SyncRateLimiter", "SyncRepository"]
