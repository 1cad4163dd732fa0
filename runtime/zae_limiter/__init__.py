"""zae-limiter: a distributed rate limiter and usage meter on DynamoDB."""

from .errors import (
    EntityError,
    EntityExistsError,
    EntityNotFoundError,
    FanoutIncomplete,
    IncompatibleSchemaError,
    InfrastructureError,
    InfrastructureNotFoundError,
    InvalidIdentifierError,
    InvalidNameError,
    LeaseExpiredError,
    NamespaceNotFoundError,
    NamespaceStateError,
    PermissionDenied,
    RateLimitError,
    RateLimiterUnavailable,
    RateLimitExceeded,
    ResourceDisabled,
    ValidationError,
    VersionError,
    VersionMismatchError,
    ZAELimiterError,
)
from .lease import Lease
from .limiter import RateLimiter
from .limits import Limit, LimitName, ScheduleEntry
from .models import (
    AuditAction,
    AuditEvent,
    Availability,
    BucketOperationResult,
    BucketState,
    CacheStats,
    ConfigSource,
    Entity,
    EntityCapacity,
    LimitStatus,
    OnUnavailable,
    ResourceCapacity,
    UsageSnapshot,
    UsageSummary,
)
from .repository import Repository
from .sync import SyncRateLimiter, SyncRepository
from .sync_lease import SyncLease
from .versioning import LIBRARY_VERSION as __version__

__all__ = [
    "AuditAction", "AuditEvent", "Availability", "BucketOperationResult", "BucketState",
    "CacheStats", "ConfigSource", "Entity", "EntityCapacity", "EntityError", "EntityExistsError",
    "EntityNotFoundError", "FanoutIncomplete", "IncompatibleSchemaError", "InfrastructureError",
    "InfrastructureNotFoundError", "InvalidIdentifierError", "InvalidNameError", "Lease",
    "LeaseExpiredError", "Limit", "LimitName", "LimitStatus", "NamespaceNotFoundError",
    "NamespaceStateError", "OnUnavailable", "PermissionDenied", "RateLimitError",
    "RateLimitExceeded", "RateLimiter", "RateLimiterUnavailable", "Repository",
    "ResourceCapacity", "ResourceDisabled", "ScheduleEntry", "SyncLease", "SyncRateLimiter", "SyncRepository", "UsageSnapshot", "UsageSummary",
    "ValidationError", "VersionError", "VersionMismatchError", "ZAELimiterError", "__version__",
]
