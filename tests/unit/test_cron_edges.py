"""Property tests of cron edges in IANA time zones, DST included (core/cron.py, docs/quotas.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import cron_reference
from zae_limiter.core import cron

ZONES = ["UTC", "America/New_York", "Europe/Paris", "Australia/Sydney", "Asia/Kolkata"]
HOUR = 3_600_000
WEEK = 7 * 24 * HOUR
instants = st.integers(
    round(datetime(2020, 1, 1, tzinfo=UTC).timestamp() * 1000),
    round(datetime(2035, 1, 1, tzinfo=UTC).timestamp() * 1000),
)


def local(ms: int, tz: str) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(tz))


def utc_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


@settings(max_examples=300, deadline=None)
@given(at=instants, tz=st.sampled_from(ZONES))
def test_weekly_edges_are_monday_midnight_local_and_bracket_every_instant(at: int, tz: str) -> None:
    weekly = cron.parse("0 0 * * 1", tz)
    last, nxt = weekly.last_edge_ms(at), weekly.next_edge_ms(at)
    assert last is not None and nxt is not None
    assert last <= at < nxt
    for edge in (last, nxt):
        moment = local(edge, tz)
        assert (moment.weekday(), moment.hour, moment.minute, moment.second) == (0, 0, 0, 0)
    assert nxt - last in (WEEK - HOUR, WEEK, WEEK + HOUR)  # a DST change shifts one week
    assert weekly.next_edge_ms(last) == nxt  # no edge in between: one reset per period


@settings(max_examples=200, deadline=None)
@given(
    at=instants,
    tz=st.sampled_from(ZONES),
    expr=st.sampled_from(
        ["0 0 * * *", "30 2 * * *", "0 */6 * * *", "15 1 1 * *", "0 9 * * MON-FRI", "0 0 13 * 5"]
    ),
)
def test_last_and_next_edges_agree_for_any_expression(at: int, tz: str, expr: str) -> None:
    schedule = cron.parse(expr, tz)
    last, nxt = schedule.last_edge_ms(at), schedule.next_edge_ms(at)
    assert last is not None and nxt is not None
    assert last <= at < nxt
    assert schedule.next_edge_ms(last) == nxt
    assert schedule.last_edge_ms(nxt - 1) == last
    assert schedule.matches_minute(last) and schedule.matches_minute(nxt)


def test_a_daily_edge_follows_local_midnight_through_both_dst_changes() -> None:
    daily = cron.parse("0 0 * * *", "America/New_York")
    # spring forward (8 March 2026): midnights at 05:00 UTC then 04:00 UTC
    assert daily.next_edge_ms(utc_ms("2026-03-08T05:00:00+00:00")) == utc_ms(
        "2026-03-09T04:00:00+00:00"
    )
    # fall back (1 November 2026): 04:00 UTC then 05:00 UTC
    assert daily.next_edge_ms(utc_ms("2026-11-01T04:00:00+00:00")) == utc_ms(
        "2026-11-02T05:00:00+00:00"
    )


def test_a_local_time_that_does_not_exist_is_skipped() -> None:
    at_230 = cron.parse("30 2 * * *", "America/New_York")
    before = utc_ms("2026-03-07T07:30:00+00:00")  # 7 March 02:30 EST
    # 8 March has no 02:30 (clocks jump from 02:00 to 03:00): the next edge is 9 March
    assert at_230.next_edge_ms(before) == utc_ms("2026-03-09T06:30:00+00:00")


def test_a_local_time_that_occurs_twice_fires_once() -> None:
    at_130 = cron.parse("30 1 * * *", "America/New_York")
    first = utc_ms("2026-11-01T05:30:00+00:00")  # 01:30 EDT, the first occurrence
    assert at_130.next_edge_ms(first - 1) == first
    assert at_130.next_edge_ms(first) == utc_ms("2026-11-02T06:30:00+00:00")  # not 06:30 on 1st


def test_restricted_day_fields_are_ored() -> None:
    thirteenth_or_friday = cron.parse("0 0 13 * 5", "UTC")
    days = []
    at = utc_ms("2026-02-01T00:00:00+00:00")
    for _ in range(6):
        nxt = thirteenth_or_friday.next_edge_ms(at)
        assert nxt is not None
        days.append(datetime.fromtimestamp(nxt / 1000, UTC).date().isoformat())
        at = nxt
    # Friday 13 February 2026 counts once; every other Friday and the 13th of March also fire
    assert days == [
        "2026-02-06",
        "2026-02-13",
        "2026-02-20",
        "2026-02-27",
        "2026-03-06",
        "2026-03-13",
    ]


@pytest.mark.parametrize(
    "expr", ["0 0 L * *", "0 0 * * 1#2", "0 0 15W * *", "0 0 0 * * 1", "61 * * * *", "0 0 * *"]
)
def test_unsupported_forms_are_rejected(expr: str) -> None:
    with pytest.raises(cron.CronError):
        cron.parse(expr, "UTC")


def test_sunday_is_zero_or_seven_and_names_are_accepted() -> None:
    at = utc_ms("2026-01-05T00:00:00+00:00")  # a Monday
    expected = utc_ms("2026-01-11T00:00:00+00:00")
    for expr in ("0 0 * * 0", "0 0 * * 7", "0 0 * * SUN", "0 0 * JAN sun"):
        assert cron.parse(expr, "UTC").next_edge_ms(at) == expected
    assert cron.parse("0 0 * * 1", "UTC").next_edge_ms(at - 1) == at
    assert timedelta(milliseconds=expected - at) == timedelta(days=6)


# --- cronsim under our rules (item 2 of issue 21) -------------------------------------------------

FIXED_HOUR = ["0 0 * * 1", "30 2 * * *", "15 1 1 * *", "0 9 * * MON-FRI", "0 0 13 * 5", "0 3 * * 0"]
HOUR_WILDCARD = ["30 * * * *", "*/5 * * * *", "0 */6 * * *", "* 9-17 * * 1-5", "0,30 * * * *"]


@settings(max_examples=300, deadline=None)
@given(at=instants, tz=st.sampled_from(ZONES), expr=st.sampled_from(FIXED_HOUR))
def test_fixed_hour_edges_agree_with_the_day_scanning_search(at: int, tz: str, expr: str) -> None:
    schedule = cron.parse(expr, tz)
    assert schedule.next_edge_ms(at) == cron_reference.next_edge_ms(schedule, at)
    assert schedule.last_edge_ms(at) == cron_reference.last_edge_ms(schedule, at)


@settings(max_examples=200, deadline=None)
@given(
    at=instants, tz=st.sampled_from(["UTC", "Asia/Kolkata"]), expr=st.sampled_from(HOUR_WILDCARD)
)
def test_hour_wildcard_edges_agree_where_there_is_no_dst(at: int, tz: str, expr: str) -> None:
    schedule = cron.parse(expr, tz)
    assert schedule.next_edge_ms(at) == cron_reference.next_edge_ms(schedule, at)
    assert schedule.last_edge_ms(at) == cron_reference.last_edge_ms(schedule, at)


def edges_between(expr: str, tz: str, start: str, end: str) -> list[str]:
    schedule, at, out = cron.parse(expr, tz), utc_ms(start), []
    while (at := schedule.next_edge_ms(at)) is not None and at < utc_ms(end):  # type: ignore[assignment]
        out.append(datetime.fromtimestamp(at / 1000, UTC).strftime("%H:%MZ"))
    return out


def test_an_hourly_schedule_fires_at_both_real_hours_of_the_autumn_repeat() -> None:
    # Paris, 25 October 2026: 03:00 CEST becomes 02:00 CET at 01:00Z, so 02:30 local is 00:30Z
    # and again 01:30Z; neither is dropped (the old search left a two-hour gap here)
    fired = edges_between(
        "30 * * * *", "Europe/Paris", "2026-10-24T23:00:00+00:00", "2026-10-25T04:00:00+00:00"
    )
    assert fired == ["23:30Z", "00:30Z", "01:30Z", "02:30Z", "03:30Z"]


def test_a_fixed_hour_fires_a_repeated_time_once_and_skips_a_missing_one() -> None:
    assert edges_between(
        "30 2 * * *", "Europe/Paris", "2026-10-24T12:00:00+00:00", "2026-10-26T12:00:00+00:00"
    ) == ["00:30Z", "01:30Z"]  # 25th, 26th
    # 29 March 2026 has no 02:30 in Paris: not moved to 03:00, skipped to the 30th
    spring = cron.parse("30 2 * * *", "Europe/Paris")
    assert spring.next_edge_ms(utc_ms("2026-03-28T12:00:00+00:00")) == utc_ms(
        "2026-03-30T00:30:00+00:00"
    )
    assert spring.last_edge_ms(utc_ms("2026-03-30T00:00:00+00:00")) == utc_ms(
        "2026-03-28T01:30:00+00:00"
    )


def test_an_hour_wildcard_skips_only_the_missing_hour_in_spring() -> None:
    fired = edges_between(
        "30 * * * *", "Europe/Paris", "2026-03-28T23:00:00+00:00", "2026-03-29T03:00:00+00:00"
    )
    assert fired == ["23:30Z", "00:30Z", "01:30Z", "02:30Z"]  # 00:30, 01:30, 03:30, 04:30 local


def test_respelled_schedules_are_the_same_schedule() -> None:
    assert cron.parse("0 0 * * MON", "UTC") == cron.parse("0 0 * * 1", "UTC")
    assert cron.parse("0 0 * * sun", "UTC") == cron.parse("0 0 * * 7", "UTC")
    assert cron.same_schedule("0 0 * * 1|Europe/Paris", "0 0 * * mon|Europe/Paris")
    assert not cron.same_schedule("0 0 * * 1|Europe/Paris", "0 0 * * 1|Europe/Berlin")
    assert cron.parse("0 0 1-31 * 1", "UTC") != cron.parse("0 0 * * 1", "UTC")  # OR, not AND


def test_a_schedule_that_never_fires_is_rejected() -> None:
    with pytest.raises(cron.CronError, match="never fires"):
        cron.parse("0 0 30 2 *", "UTC")
