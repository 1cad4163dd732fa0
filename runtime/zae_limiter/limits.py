"""`Limit` and `ScheduleEntry`: what a resource's limits are (docs/limits-and-time.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from . import concurrent_limits, validation
from .core import cron
from .errors import ValidationError

MAX_PERIOD_SECONDS = 10**9
MAX_SCALE = 10**6
#: Alert thresholds are percents of a limit's capacity (above 100: a soft limit's overdraw).
MIN_ALERT_PERCENT, MAX_ALERT_PERCENT = 1, 1000


@dataclass(frozen=True)
class ScheduleEntry:
    """A cron entry (parameter period) or a reset edge (`ScheduleEntry.reset`)."""

    cron: str
    tz: str = "UTC"
    scale: float | None = None
    capacity: int | None = None
    refill_amount: int | None = None
    refill_period_seconds: int | None = None

    def __post_init__(self) -> None:
        try:
            cron.zone(self.tz)
        except cron.CronError as exc:
            raise ValidationError("schedule tz", self.tz, str(exc)) from exc
        try:
            cron.parse(self.cron, self.tz)
        except cron.CronError as exc:
            raise ValidationError("schedule cron", self.cron, str(exc)) from exc
        if self.scale is not None:
            if self.has_absolute:
                raise ValidationError(
                    "schedule entry", self, "set either scale or absolute fields, not both"
                )
            if isinstance(self.scale, bool) or not 0 < self.scale <= MAX_SCALE:
                raise ValidationError("scale", self.scale, f"must be > 0 and <= {MAX_SCALE}")
        for name, high in (
            ("capacity", validation.MAX_AMOUNT),
            ("refill_amount", validation.MAX_AMOUNT),
            ("refill_period_seconds", MAX_PERIOD_SECONDS),
        ):
            value = getattr(self, name)
            if value is not None:
                validation.whole_number(value, name, 1, high)

    @property
    def has_absolute(self) -> bool:
        return any(
            v is not None for v in (self.capacity, self.refill_amount, self.refill_period_seconds)
        )

    @property
    def is_parameter_entry(self) -> bool:
        return self.scale is not None or self.has_absolute

    @classmethod
    def reset(cls, cron: str, tz: str = "UTC") -> ScheduleEntry:
        """A reset edge for a calendar quota."""
        return cls(cron=cron, tz=tz)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cron": self.cron, "tz": self.tz}
        for name in ("scale", "capacity", "refill_amount", "refill_period_seconds"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScheduleEntry:
        return cls(**data)


@dataclass(frozen=True)
class Limit:
    """A named rule on a resource: a dripping rate, a quota that resets, or a concurrency limit
    (`concurrent`: `capacity` is `max_in_flight`, held while a lease lasts; never drips or
    resets; its `refill_period_seconds` is its `lease_ttl_seconds`)."""

    name: str
    capacity: int
    refill_amount: int
    refill_period_seconds: int
    schedule: tuple[ScheduleEntry, ...] = field(default_factory=tuple)
    reset_schedule: tuple[ScheduleEntry, ...] = field(default_factory=tuple)
    reset_after: timedelta | None = None
    soft: bool = False
    if TYPE_CHECKING:
        concurrent: concurrent_limits.Member = concurrent_limits.Member()
    else:
        concurrent: bool = False
    lease_ttl_seconds: int | None = None
    alert_at: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        validation.limit_name(self.name)
        object.__setattr__(self, "alert_at", _alert_thresholds(self.alert_at, self))
        object.__setattr__(self, "schedule", tuple(self.schedule))
        object.__setattr__(self, "reset_schedule", tuple(self.reset_schedule))
        if concurrent_limits.check(self):
            return
        validation.whole_number(self.capacity, "capacity", 1, validation.MAX_AMOUNT)
        validation.whole_number(self.refill_amount, "refill_amount", 0, validation.MAX_AMOUNT)
        validation.whole_number(
            self.refill_period_seconds, "refill_period_seconds", 1, MAX_PERIOD_SECONDS
        )
        if not isinstance(self.soft, bool):
            raise ValidationError("soft", self.soft, "must be True or False")
        if self.reset_after is not None:
            if not isinstance(self.reset_after, timedelta):
                raise ValidationError("reset_after", self.reset_after, "must be a timedelta")
            seconds = self.reset_after.total_seconds()
            if seconds != int(seconds) or not 1 <= seconds <= MAX_PERIOD_SECONDS:
                raise ValidationError(
                    "reset_after", self.reset_after, "must be whole seconds from 1 to 10**9"
                )
            if self.reset_schedule:
                raise ValidationError(
                    "reset_after", self.reset_after, "use either cron or reset_after, not both"
                )
        if self.is_quota and self.refill_amount != 0:
            raise ValidationError(
                "refill_amount", self.refill_amount, "a quota never drips: refill_amount must be 0"
            )
        if not self.is_quota and self.refill_amount == 0:
            raise ValidationError(
                "refill_amount", 0, "a dripping limit needs refill_amount > 0 (or make it a quota)"
            )
        for entry in self.reset_schedule:
            if entry.is_parameter_entry:
                raise ValidationError("reset_schedule", entry, "reset edges take only cron and tz")
        zones = {entry.tz for entry in self.schedule}
        if len(zones) > 1:
            raise ValidationError("schedule", self.schedule, "all entries must share one tz")
        for entry in self.schedule:
            if not entry.is_parameter_entry:
                raise ValidationError("schedule", entry, "set scale or absolute fields")
            if self.is_quota and (entry.refill_amount or entry.refill_period_seconds):
                raise ValidationError("schedule", entry, "a quota may not be given a refill")

    # --- constructors ----------------------------------------------------------------------

    @classmethod
    def _concurrency_limit(
        cls,
        name: str,
        max_in_flight: int,
        *,
        lease_ttl: timedelta | float = timedelta(seconds=60),
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        """`Limit.concurrent`: a cap on what is held at once. A lease's hold comes back when the
        lease ends, or `lease_ttl` (whole seconds, 1 s to 1 day) after its process last renewed
        it (docs/concurrency.md)."""
        ttl = concurrent_limits.lease_ttl_seconds(lease_ttl)
        return cls(
            name,
            max_in_flight,
            0,
            ttl,
            soft=soft,
            concurrent=True,
            lease_ttl_seconds=ttl,
            alert_at=alert_at,
        )

    @classmethod
    def per_second(
        cls,
        name: str,
        rate: int,
        burst: int | None = None,
        *,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        return cls._rate(name, rate, burst, 1, soft, alert_at)

    @classmethod
    def per_minute(
        cls,
        name: str,
        rate: int,
        burst: int | None = None,
        *,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        return cls._rate(name, rate, burst, 60, soft, alert_at)

    @classmethod
    def per_hour(
        cls,
        name: str,
        rate: int,
        burst: int | None = None,
        *,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        return cls._rate(name, rate, burst, 3600, soft, alert_at)

    @classmethod
    def per_day(
        cls,
        name: str,
        rate: int,
        burst: int | None = None,
        *,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        return cls._rate(name, rate, burst, 86400, soft, alert_at)

    @classmethod
    def _rate(
        cls,
        name: str,
        rate: int,
        burst: int | None,
        period: int,
        soft: bool,
        alert_at: tuple[int, ...],
    ) -> Limit:
        validation.whole_number(rate, "rate", 1, validation.MAX_AMOUNT)
        capacity = rate if burst is None else burst
        return cls(name, capacity, rate, period, soft=soft, alert_at=alert_at)

    @classmethod
    def custom(
        cls,
        name: str,
        capacity: int,
        refill_amount: int,
        refill_period_seconds: int,
        *,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        return cls(
            name, capacity, refill_amount, refill_period_seconds, soft=soft, alert_at=alert_at
        )

    @classmethod
    def quota(
        cls,
        name: str,
        amount: int,
        *,
        cron: str | None = None,
        tz: str = "UTC",
        reset_after: timedelta | None = None,
        soft: bool = False,
        alert_at: tuple[int, ...] = (),
    ) -> Limit:
        """A non-dripping allowance: exactly one of `cron` (calendar) or `reset_after` (session)."""
        if (cron is None) == (reset_after is None):
            raise ValidationError(
                "quota", name, "give exactly one of cron= (calendar) or reset_after= (session)"
            )
        edges = (ScheduleEntry.reset(cron, tz),) if cron is not None else ()
        period = int(reset_after.total_seconds()) if reset_after is not None else 60
        period = max(1, min(period, MAX_PERIOD_SECONDS))
        return cls(
            name,
            amount,
            0,
            period,
            reset_schedule=edges,
            reset_after=reset_after,
            soft=soft,
            alert_at=alert_at,
        )

    def with_schedule(self, schedule: tuple[ScheduleEntry, ...]) -> Limit:
        return replace(self, schedule=tuple(schedule))

    def with_reset_schedule(self, reset_schedule: tuple[ScheduleEntry, ...]) -> Limit:
        if not self.is_quota:
            raise ValidationError("reset_schedule", reset_schedule, "only quotas have reset edges")
        return replace(self, reset_schedule=tuple(reset_schedule))

    # --- properties ------------------------------------------------------------------------

    @property
    def is_quota(self) -> bool:
        return bool(self.reset_schedule) or self.reset_after is not None

    @property
    def is_session(self) -> bool:
        return self.reset_after is not None

    @property
    def reset_after_seconds(self) -> int | None:
        return None if self.reset_after is None else int(self.reset_after.total_seconds())

    @property
    def refill_rate(self) -> float:
        """Tokens per second (display only; 0 for quotas)."""
        return 0.0 if self.is_quota else self.refill_amount / self.refill_period_seconds

    @property
    def kind(self) -> str:
        if self.concurrent:
            return "concurrent"
        return "quota" if self.is_quota else "rate"

    # --- manifest form ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"capacity": self.capacity}
        if self.concurrent:
            out["concurrent"] = True
            out["lease_ttl_seconds"] = self.lease_ttl_seconds
        elif not self.is_quota:
            out["refill_amount"] = self.refill_amount
            out["refill_period_seconds"] = self.refill_period_seconds
        if self.schedule:
            out["schedule"] = [entry.to_dict() for entry in self.schedule]
        if self.reset_schedule:
            out["reset_schedule"] = [entry.to_dict() for entry in self.reset_schedule]
        if self.reset_after is not None:
            out["reset_after_seconds"] = self.reset_after_seconds
        if self.soft:
            out["soft"] = True
        if self.alert_at:
            out["alert_at"] = list(self.alert_at)
        return out

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Limit:
        """Build from the manifest's field names (`refill_period` accepted as an alias)."""
        known = {
            "capacity",
            "refill_amount",
            "refill_period_seconds",
            "refill_period",
            "schedule",
            "reset_schedule",
            "reset_after_seconds",
            "soft",
            "concurrent",
            "lease_ttl_seconds",
            "alert_at",
        }
        unknown = set(data) - known
        if unknown:
            raise ValidationError("limit field", sorted(unknown), f"unknown in limit {name!r}")
        if "capacity" not in data:
            raise ValidationError("capacity", None, f"limit {name!r} needs a capacity")
        resets = tuple(ScheduleEntry.from_dict(e) for e in data.get("reset_schedule", ()))
        after = data.get("reset_after_seconds")
        if after is not None:
            validation.whole_number(after, "reset_after_seconds", 1, MAX_PERIOD_SECONDS)
        concurrent = data.get("concurrent", False)
        ttl = data.get("lease_ttl_seconds")
        no_refill = bool(resets) or after is not None or concurrent is True
        period = data.get("refill_period_seconds", data.get("refill_period"))
        if period is None:
            period = after if after is not None else 60
        if concurrent is True:  # its period is its lease; a refill given is reported
            period = concurrent_limits.DEFAULT_LEASE_TTL_SECONDS if ttl is None else ttl
        refill = data.get("refill_amount", 0 if no_refill else data["capacity"])
        return cls(
            name,
            data["capacity"],
            refill,
            period,
            schedule=tuple(ScheduleEntry.from_dict(e) for e in data.get("schedule", ())),
            reset_schedule=resets,
            reset_after=timedelta(seconds=after) if after is not None else None,
            soft=data.get("soft", False),
            concurrent=concurrent,
            lease_ttl_seconds=ttl,
            alert_at=tuple(data.get("alert_at", ())),
        )


# The dataclass was built with a plain `concurrent: bool = False` field; the member now serves
# both the field (on a limit) and the constructor `Limit.concurrent(...)` (on the class).
setattr(Limit, "concurrent", concurrent_limits.Member(Limit._concurrency_limit))  # noqa: B010


def _alert_thresholds(value: Any, limit: Limit) -> tuple[int, ...]:
    """`alert_at` as stored: whole percents 1-1000, ascending (any order is accepted), each once;
    above 100 only on a soft `limit` (a hard one never gets there)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
        raise ValidationError(
            "alert_at", value, "must be a tuple of whole percents, e.g. alert_at=(80, 100)"
        )
    for percent in value:
        if (
            isinstance(percent, bool)
            or not isinstance(percent, int)
            or not MIN_ALERT_PERCENT <= percent <= MAX_ALERT_PERCENT
        ):
            raise ValidationError(
                "alert_at",
                percent,
                f"each threshold must be a whole percent from {MIN_ALERT_PERCENT} to "
                f"{MAX_ALERT_PERCENT} (e.g. 80 for 80 %)",
            )
    repeated = sorted({p for p in value if list(value).count(p) > 1})
    if repeated:
        raise ValidationError("alert_at", repeated, "list each threshold once")
    if limit.soft is not True and any(percent > 100 for percent in value):
        raise ValidationError(
            "alert_at",
            tuple(sorted(value)),
            f"limit {limit.name!r} is hard: it refuses what would take it past 100 %, so a "
            "threshold above 100 can never be crossed; use thresholds up to 100, or soft=True "
            "to let use run into debt and alert there",
        )
    return tuple(sorted(value))


def identity(limit: Limit) -> tuple[Any, ...]:
    """What makes two limits the same configuration: every field, with each schedule compared as
    the schedule it is, not as spelled (`0 0 * * 1` and `0 0 * * MON` are one schedule)."""

    def entries(schedule: tuple[ScheduleEntry, ...]) -> tuple[Any, ...]:
        return tuple(
            (
                cron.parse(e.cron, e.tz),
                e.scale,
                e.capacity,
                e.refill_amount,
                e.refill_period_seconds,
            )
            for e in schedule
        )

    return (
        limit.name,
        limit.capacity,
        limit.refill_amount,
        limit.refill_period_seconds,
        limit.reset_after,
        limit.soft,
        limit.concurrent,
        limit.lease_ttl_seconds,
        limit.alert_at,
        entries(limit.schedule),
        entries(limit.reset_schedule),
    )


def check_limit_list(limits: Any, field: str = "limits") -> list[Limit]:
    """A list of `Limit` with unique names."""
    if not isinstance(limits, (list, tuple)) or not all(isinstance(x, Limit) for x in limits):
        raise ValidationError(field, limits, "must be a list of Limit")
    names = [limit.name for limit in limits]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValidationError(field, duplicates, "limit names must be unique within a list")
    return list(limits)


class LimitName:
    """Naming helpers."""

    RPM = "rpm"
    TPM = "tpm"
    RPH = "rph"
    TPH = "tph"
    RPD = "rpd"
    TPD = "tpd"
