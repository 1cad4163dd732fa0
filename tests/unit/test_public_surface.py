"""The public surface of `zae_limiter` is pinned: adding or removing a name is a decision."""

from __future__ import annotations

import zae_limiter

PUBLIC = {
    # clients
    "Repository", "RateLimiter", "Lease",
    "SyncRepository", "SyncRateLimiter", "SyncLease",
    # limits and results
    "Limit", "LimitName", "ScheduleEntry", "OnUnavailable", "ConfigSource",
    "LimitStatus", "Availability", "BucketState", "BucketOperationResult", "CacheStats",
    "Entity", "EntityCapacity", "ResourceCapacity", "AuditAction", "AuditEvent",
    "UsageSnapshot", "UsageSummary", "RequestEvent", "RequestListener", "AlertEvent",
    # errors
    "ZAELimiterError", "ValidationError", "InvalidIdentifierError", "InvalidNameError",
    "RateLimitError", "RateLimitExceeded", "ResourceDisabled", "LeaseExpiredError",
    "RateLimiterUnavailable", "PermissionDenied", "FanoutIncomplete",
    "EntityError", "EntityExistsError", "EntityNotFoundError",
    "InfrastructureError", "InfrastructureNotFoundError",
    "NamespaceNotFoundError", "NamespaceStateError", "TableRecreatedError",
    "VersionError", "VersionMismatchError", "IncompatibleSchemaError",
    "__version__",
}  # fmt: skip


def test_all_is_exactly_the_public_surface() -> None:
    assert set(zae_limiter.__all__) == PUBLIC
    assert len(zae_limiter.__all__) == len(PUBLIC)  # no name listed twice


def test_every_public_name_is_importable() -> None:
    for name in zae_limiter.__all__:
        assert getattr(zae_limiter, name) is not None, name


def test_every_public_error_is_a_zaelimitererror() -> None:
    for name in zae_limiter.__all__:
        value = getattr(zae_limiter, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, zae_limiter.ZAELimiterError), name


def test_the_names_public_at_their_module_paths() -> None:
    """The lease's resource handle and its sync twin (docs/sync.md), the resource cap
    (docs/several-resources.md), the CDK construct (docs/deploying.md)."""
    from zae_limiter.cdk import ZaeLimiter
    from zae_limiter.lease import LeaseResource
    from zae_limiter.limiter import MAX_ACQUIRE_RESOURCES
    from zae_limiter.sync_lease import SyncLeaseResource

    assert MAX_ACQUIRE_RESOURCES == 16
    assert LeaseResource.__name__ == "LeaseResource"
    assert SyncLeaseResource.__name__ == "SyncLeaseResource"
    assert ZaeLimiter.__name__ == "ZaeLimiter"
