"""The concurrency shape of `Limit` (docs/concurrency.md): its lease, its rules, and the
`Limit.concurrent` member. Pure, no I/O."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, overload

from . import validation
from .errors import ValidationError

if TYPE_CHECKING:
    from .limits import Limit

#: How long a hold lives without a renewal: whole seconds from 1 s to 1 day.
MIN_LEASE_TTL_SECONDS, MAX_LEASE_TTL_SECONDS = 1, 86400
DEFAULT_LEASE_TTL_SECONDS = 60
_FOREVER = "holds come back when leases end"


class Constructor(Protocol):
    def __call__(
        self,
        name: str,
        max_in_flight: int,
        *,
        lease_ttl: timedelta | float = ...,
        soft: bool = ...,
        alert_at: tuple[int, ...] = ...,
    ) -> Limit: ...


class Member:
    """`Limit.concurrent` (spec §2.7): the constructor on the class, the bool field on a limit.
    `build` is the constructor (limits.py hands it over once the class exists)."""

    def __init__(self, build: Constructor | None = None) -> None:
        self._build = build

    @overload
    def __get__(self, obj: None, owner: type[Limit]) -> Constructor: ...
    @overload
    def __get__(self, obj: Limit, owner: type[Limit]) -> bool: ...
    def __get__(self, obj: Limit | None, owner: type[Limit]) -> Constructor | bool:
        if obj is None:
            assert self._build is not None, "limits.py sets Limit.concurrent up at import"
            return self._build
        value: bool = obj.__dict__.get("concurrent", False)
        return value

    def __set__(self, obj: Limit, value: bool) -> None:
        obj.__dict__["concurrent"] = value


def lease_ttl_seconds(value: Any) -> int:
    """`lease_ttl` (a timedelta or seconds) as whole seconds from 1 s to 1 day."""
    if isinstance(value, timedelta):
        seconds: Any = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value
    else:
        raise ValidationError("lease_ttl", value, "must be a timedelta or a number of seconds")
    if seconds != int(seconds) or not MIN_LEASE_TTL_SECONDS <= seconds <= MAX_LEASE_TTL_SECONDS:
        raise ValidationError(
            "lease_ttl",
            value,
            f"must be whole seconds from {MIN_LEASE_TTL_SECONDS} s to {MAX_LEASE_TTL_SECONDS} s "
            "(1 day), e.g. lease_ttl=timedelta(seconds=60)",
        )
    return int(seconds)


def check(limit: Limit) -> bool:
    """Validate the concurrency fields (filling the default lease); True for a concurrency
    limit, whose other rules this checks too."""
    if not isinstance(limit.concurrent, bool):
        raise ValidationError("concurrent", limit.concurrent, "must be True or False")
    if not limit.concurrent:
        if limit.lease_ttl_seconds is not None:
            raise ValidationError(
                "lease_ttl_seconds",
                limit.lease_ttl_seconds,
                f"limit {limit.name!r}: only a concurrency limit has a lease "
                "(use Limit.concurrent, or concurrent: true in a manifest)",
            )
        return False
    validation.whole_number(limit.capacity, "max_in_flight", 1, validation.MAX_AMOUNT)
    if not isinstance(limit.soft, bool):
        raise ValidationError("soft", limit.soft, "must be True or False")
    ttl = limit.lease_ttl_seconds
    if ttl is None:
        ttl = DEFAULT_LEASE_TTL_SECONDS
    validation.whole_number(ttl, "lease_ttl_seconds", MIN_LEASE_TTL_SECONDS, MAX_LEASE_TTL_SECONDS)
    object.__setattr__(limit, "lease_ttl_seconds", ttl)
    object.__setattr__(limit, "refill_period_seconds", ttl)
    if limit.refill_amount != 0:
        raise ValidationError(
            "refill_amount",
            limit.refill_amount,
            f"limit {limit.name!r} is concurrent: it never drips, drop the refill ({_FOREVER})",
        )
    if limit.schedule:
        raise ValidationError(
            "schedule", limit.schedule, f"limit {limit.name!r} is concurrent: drop the schedule"
        )
    if limit.reset_schedule or limit.reset_after is not None:
        raise ValidationError(
            "reset",
            limit.reset_schedule or limit.reset_after,
            f"limit {limit.name!r} is concurrent: it never resets, drop the cron/reset_after "
            f"({_FOREVER})",
        )
    return True


def check_amount(name: str, amount: int, max_in_flight: int, where: str) -> None:
    """An amount above a concurrency limit's `max_in_flight` can never be held: refuse it
    (`where` says whose limit, e.g. "'api' for 'user-1'")."""
    if amount > max_in_flight:
        raise ValidationError(
            f"consume[{name!r}]",
            amount,
            f"{where} holds at most {max_in_flight} {name!r} at once (max_in_flight); "
            "ask for at most that much, or raise max_in_flight",
        )
