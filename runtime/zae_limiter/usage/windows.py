"""Usage snapshot windows (UTC) and the time values the usage API accepts. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ..core.times import epoch_ms, iso_seconds, utc
from ..errors import ValidationError

WindowType = Literal["hourly", "daily", "monthly"]
WINDOW_TYPES: tuple[WindowType, ...] = ("hourly", "daily", "monthly")
DEFAULT_WINDOWS: tuple[WindowType, ...] = ("hourly", "daily")


def bounds(event_ms: int, window_type: str) -> tuple[int, int]:
    """(start, end) epoch ms of the UTC window of `window_type` that contains `event_ms`."""
    moment = utc(event_ms)
    if window_type == "hourly":
        start = moment.replace(minute=0, second=0, microsecond=0)
        return epoch_ms(start), epoch_ms(start + timedelta(hours=1))
    if window_type == "daily":
        start = moment.replace(hour=0, minute=0, second=0, microsecond=0)
        return epoch_ms(start), epoch_ms(start + timedelta(days=1))
    if window_type == "monthly":
        start = moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
        return epoch_ms(start), epoch_ms(end)
    raise ValueError(f"unknown window type {window_type!r}")


def window_type(value: Any, field: str = "window_type") -> WindowType:
    for known in WINDOW_TYPES:
        if value == known:
            return known
    raise ValidationError(field, value, f"use one of {', '.join(WINDOW_TYPES)}")


def query_time(value: Any, field: str) -> str | None:
    """A `start_time`/`end_time` argument -> stored form, rounded up to a whole second.

    `datetime` (naive means UTC) or an ISO-8601 string; None stays None. Windows start on whole
    seconds, so rounding up keeps `start <= window_start < end` exact.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValidationError(
                field, value, "use an ISO-8601 time such as 2026-01-05T14:00:00Z"
            ) from None
    elif isinstance(value, datetime):
        moment = value
    else:
        raise ValidationError(field, value, "give a datetime or an ISO-8601 string")
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    if moment.microsecond:
        moment = moment.replace(microsecond=0) + timedelta(seconds=1)
    return iso_seconds(epoch_ms(moment))
