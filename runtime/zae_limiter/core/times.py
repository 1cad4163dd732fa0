"""Epoch milliseconds as UTC datetimes and ISO-8601 text: the two forms the table stores. Pure.

- `iso_millis`: a moment, `2026-01-05T14:00:00.123Z` (audit `timestamp`, `created_at`,
  `updated_at`, `dead_lettered_at`).
- `iso_seconds`: whole seconds, `2026-01-05T14:00:00Z` (usage snapshot windows, an alert's
  `period_start` and `crossed_at`); `from_iso_seconds` reads it back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ISO_SECONDS = "%Y-%m-%dT%H:%M:%SZ"


def utc(ms: int) -> datetime:
    """Epoch ms -> an aware UTC datetime (exact: no float on the way)."""
    return EPOCH + timedelta(milliseconds=ms)


def epoch_ms(moment: datetime) -> int:
    """An aware datetime -> epoch ms (whole milliseconds, towards the past)."""
    return (moment - EPOCH) // timedelta(milliseconds=1)


def iso_seconds(ms: int) -> str:
    """Epoch ms -> `2026-01-05T14:00:00Z` (the second it falls in)."""
    return utc(ms).strftime(ISO_SECONDS)


def from_iso_seconds(text: str) -> int:
    """`2026-01-05T14:00:00Z` -> epoch ms."""
    return epoch_ms(datetime.strptime(text, ISO_SECONDS).replace(tzinfo=UTC))


def iso_millis(ms: int) -> str:
    """Epoch ms -> `2026-01-05T14:00:00.123Z`."""
    return utc(ms).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
