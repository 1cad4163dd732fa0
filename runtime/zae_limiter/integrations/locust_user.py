"""A Locust user that acquires through the sync facade (`pip install 'zae-limiter[loadtest]'`).

Subclass it in a locustfile and say where and what to acquire (docs/performance.md, "Locust")::

    from zae_limiter.integrations.locust_user import LimiterUser

    class SearchUser(LimiterUser):
        table = "rate_limits"
        endpoint_url = "http://127.0.0.1:8000"  # the one `zae-limiter local env` prints
        resource = "search"
        consume = {"requests": 1}

    # locust -f locustfile.py --headless -u 32 -r 32 -t 30s

Each user acquires and releases in a loop as entity `<entity_prefix><n>` (n: the user's number
in its process), reporting every call to Locust as request type `acquire`, named by the
resource; a `RateLimitExceeded` or any other `ZAELimiterError` is reported as that request's
failure. The users of one Locust process share one `SyncRepository` (the facade runs every call
on one background event loop; under gevent the waiting user yields to the others), closed when
the test stops. A non-loopback endpoint is refused unless `allow_aws = True`.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any, ClassVar, cast

from locust import User, constant, events, task

from ..errors import ValidationError, ZAELimiterError
from ..loadtest import is_loopback
from ..sync import SyncRateLimiter, SyncRepository


class LimiterUser(User):
    """Acquire `consume` from `resource` in a loop; subclass and set the class attributes."""

    abstract = True
    wait_time = constant(0)

    table: ClassVar[str | None] = None
    endpoint_url: ClassVar[str | None] = None
    region: ClassVar[str | None] = None
    namespace: ClassVar[str | None] = None
    resource: ClassVar[str] = "search"
    consume: ClassVar[dict[str, int]] = {"requests": 1}
    entity_prefix: ClassVar[str] = "locust-user-"
    allow_aws: ClassVar[bool] = False

    _shared: ClassVar[dict[tuple[Any, ...], SyncRepository]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()
    _numbers: ClassVar[itertools.count[int]] = itertools.count()

    def on_start(self) -> None:
        if not self.allow_aws and not is_loopback(self.endpoint_url):
            raise ValidationError(
                "endpoint_url",
                self.endpoint_url,
                "not on this machine; give a loopback endpoint, or set allow_aws = True to "
                "send the load to AWS (it costs money)",
            )
        self.limiter = SyncRateLimiter(self._repository())
        self.entity_id = f"{self.entity_prefix}{next(LimiterUser._numbers)}"

    def _repository(self) -> SyncRepository:
        key = (self.table, self.endpoint_url, self.region, self.namespace)
        with LimiterUser._lock:
            repo = LimiterUser._shared.get(key)
            if repo is None:
                args = () if self.namespace is None else (self.namespace,)
                repo = SyncRepository.open(
                    *args, table=self.table, endpoint_url=self.endpoint_url, region=self.region
                )
                LimiterUser._shared[key] = repo
            return repo

    @task
    def acquire_once(self) -> None:
        """One acquire and release, reported to Locust."""
        started = time.perf_counter()
        failure: BaseException | None = None
        try:
            with self.limiter.acquire(self.entity_id, self.resource, consume=self.consume):
                pass
        except ZAELimiterError as exc:
            failure = exc
        self.environment.events.request.fire(
            request_type="acquire",
            name=self.resource,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=0,
            exception=failure,
            context={"entity_id": self.entity_id},
        )


def _close_repositories(**_: Any) -> None:
    with LimiterUser._lock:
        shared = list(LimiterUser._shared.values())
        LimiterUser._shared.clear()
    for repo in shared:
        repo.close()


cast(Any, events.test_stop).add_listener(_close_repositories)
