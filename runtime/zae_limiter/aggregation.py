"""Former name of `zae_limiter.stream_records` (what the aggregator counts), for old imports."""

from .stream_records import (
    ARCHIVE_PREFIX,
    TTL_PRINCIPAL,
    BucketChange,
    MalformedRecord,
    StreamRecord,
    archive_object,
    audit_line,
    bucket_change,
    is_audit_expiry,
    is_bucket,
    lambda_record,
    parse_record,
    snapshot_counts,
)

__all__ = [
    "ARCHIVE_PREFIX",
    "TTL_PRINCIPAL",
    "BucketChange",
    "MalformedRecord",
    "StreamRecord",
    "archive_object",
    "audit_line",
    "bucket_change",
    "is_audit_expiry",
    "is_bucket",
    "lambda_record",
    "parse_record",
    "snapshot_counts",
]
