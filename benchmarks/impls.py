"""The two implementations behind one small interface (imported by the worker, in either venv).

Everything the workloads do goes through the public API the two share (`RateLimiter(repo)`,
`set_resource_defaults`, `create_entity`, `set_limits`, `repo.set_resource_cascade`,
`acquire(..., also=...)`, `lease.adjust`, `lease.resource(name)`). Only creating a table,
opening a repository and reaching the aiobotocore client differ; that is all an `Impl` says.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

REGION = "us-east-1"


class Impl(Protocol):
    """How one implementation creates a table, opens a repository and exposes its client."""

    name: str
    endpoint_url: str

    async def create_table(self, table: str) -> None: ...

    async def open(self, table: str, *, rejection_cache_ttl: float = 1.0, **more: Any) -> Any: ...

    async def client(self, repo: Any) -> Any: ...


class Ours:
    """This repository's library (runtime/zae_limiter)."""

    name = "ours"

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url

    async def create_table(self, table: str) -> None:
        from zae_limiter import Repository

        await Repository.create_table(table=table, endpoint_url=self.endpoint_url, region=REGION)

    async def open(self, table: str, *, rejection_cache_ttl: float = 1.0, **more: Any) -> Any:
        """`more`: other `Repository.open` arguments (the fleet phase passes its clock)."""
        from zae_limiter import Repository

        return await Repository.open(
            table=table,
            endpoint_url=self.endpoint_url,
            region=REGION,
            rejection_cache_ttl=rejection_cache_ttl,
            **more,
        )

    async def client(self, repo: Any) -> Any:
        return repo.transport.client


class Theirs:
    """zae-limiter 0.17.0 from PyPI, with its default client settings.

    0.17.0 provisions through CloudFormation (or LocalStack); DynamoDB Local has neither. The
    table is made the way its own `Repository.create_table()` makes it, then the `default`
    namespace and the version record are written as its provisioning would write them after
    deploying its Lambdas (the record names this version as the deployed Lambda code; without
    that, 0.17.0 refuses to store a cascade policy). `open(auto_update=False)` then connects
    without touching Lambda.
    """

    name = "theirs"

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url

    def _repository(self, table: str, **kwargs: Any) -> Any:
        return _earlier_repository_class()(
            table,
            region=REGION,
            endpoint_url=self.endpoint_url,
            _skip_deprecation_warning=True,
            **kwargs,
        )

    async def create_table(self, table: str) -> None:
        import zae_limiter

        repo = self._repository(table)
        try:
            await repo.create_table()
            await repo._register_namespace("default")
            repo._deployed_lambda_version = zae_limiter.__version__
            await repo._initialize_version_record()
        finally:
            await repo.close()

    async def open(self, table: str, *, rejection_cache_ttl: float = 1.0, **more: Any) -> Any:
        """`more` is for ours only (0.17.0 takes no clock)."""
        return await _earlier_repository_class().open(
            stack=table,
            region=REGION,
            endpoint_url=self.endpoint_url,
            auto_update=False,
            rejection_cache_ttl=rejection_cache_ttl,
        )

    async def client(self, repo: Any) -> Any:
        return await repo._get_client()


def _earlier_repository_class() -> Any:
    """0.17.0's Repository (typed as Any: its signatures are not ours)."""
    import zae_limiter

    return zae_limiter.Repository


IMPLS: dict[str, type[Ours] | type[Theirs]] = {"ours": Ours, "theirs": Theirs}


def make_impl(name: str, endpoint_url: str) -> Ours | Theirs:
    return IMPLS[name](endpoint_url)


def library_info() -> dict[str, str]:
    """Which `zae_limiter` this interpreter imported, and its transport versions."""
    import aiobotocore
    import botocore

    import zae_limiter

    return {
        "zae_limiter": getattr(zae_limiter, "__version__", "?"),
        "zae_limiter_path": os.path.dirname(zae_limiter.__file__),
        "aiobotocore": aiobotocore.__version__,
        "botocore": botocore.__version__,
    }
