"""Property tests of cron edges in IANA time zones, DST included (core/cron.py, docs/quotas.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
