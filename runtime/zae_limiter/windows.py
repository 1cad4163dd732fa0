"""Former name of `zae_limiter.usage_windows` (usage snapshot windows), kept for old imports."""

from .usage_windows import (
    DEFAULT_WINDOWS,
    ISO_FORMAT,
    WINDOW_TYPES,
    WindowType,
    bounds,
    from_iso,
    iso,
    query_time,
    window_type,
)

__all__ = [
    "DEFAULT_WINDOWS",
    "ISO_FORMAT",
    "WINDOW_TYPES",
    "WindowType",
    "bounds",
    "from_iso",
    "iso",
    "query_time",
    "window_type",
]
