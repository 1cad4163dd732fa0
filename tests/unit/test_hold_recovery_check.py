"""The hold history checker's recovery bound (tests/support/history/hold_checker.py): a killed
process's entry must be gone from every write planned a lease_ttl after another process first
saw it as last written."""

from __future__ import annotations

from support.history.hold_checker import SETTLE_S, Write, check_hold_lines, recovery

TTL = 2.0


def wrote(process: str, at: float, *keys: str) -> Write:
    return Write(process, at, at + 0.01, frozenset(keys))


def test_an_entry_freed_by_the_first_write_past_its_bound_is_on_time() -> None:
    seen = 10 + SETTLE_S  # the dead entry was last written at 10 (expiry 12)
    writes = [wrote("b", seen, "a.1"), wrote("b", seen + TTL + 0.1), wrote("c", seen + 4)]
    checked = recovery("a.1", 12.0, "a", writes, TTL)
    assert checked.freed == seen + TTL + 0.1 and checked.bound == seen + TTL + 0.1
    assert not checked.late


def test_an_entry_still_shown_past_its_bound_is_late() -> None:
    seen = 10 + SETTLE_S
    writes = [wrote("b", seen, "a.1"), wrote("b", seen + TTL + 0.1, "a.1"), wrote("c", seen + 5)]
    checked = recovery("a.1", 12.0, "a", writes, TTL)
    assert checked.bound == seen + TTL + 0.1 and checked.freed == seen + 5
    assert checked.late


def test_without_a_write_late_enough_the_bound_is_unknown() -> None:
    writes = [wrote("b", 11.5, "a.1"), wrote("a", 20.0)]  # the owner's own writes do not count
    checked = recovery("a.1", 12.0, "a", writes, TTL)
    assert checked.bound is None and checked.freed is None and not checked.late


def test_a_lost_hold_ends_at_its_own_write_that_shows_its_entry_gone() -> None:
    """The simulation's seed drawn(51) on main: a renewal confirmed late logged an expiry (10)
    past the write (at 5) in which the holder removed the entry its lease already counted
    lost; another process's hold from 7 is then the only one held (cap 1)."""
    holder = [
        {"e": "held", "op": "a-1", "t": 1.0, "key": "a.1"},
        {"e": "entry", "key": "a.1", "expiry": 10.0},
        {"e": "wrote", "t": 5.0, "rt": 5.01, "keys": ["a.2"]},
        {"e": "leave", "op": "a-1", "t": 6.0, "lost": True},
        {"e": "left", "op": "a-1", "t": 6.1, "ok": True},
    ]
    other = [
        {"e": "held", "op": "b-1", "t": 7.0, "key": "b.1"},
        {"e": "leave", "op": "b-1", "t": 8.0, "lost": False},
    ]
    checked = check_hold_lines({"a": holder, "b": other}, cap=1, ttl=TTL)
    assert checked.over == [] and checked.max_held == 1
    kept = [line for line in holder if line["e"] != "wrote"]  # no write shows it gone:
    assert check_hold_lines({"a": kept, "b": other}, cap=1, ttl=TTL).over == [7.0]  # until 10
