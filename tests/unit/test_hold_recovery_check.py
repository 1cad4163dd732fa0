"""The hold history checker's recovery bound (tests/support/history/hold_checker.py): a killed
process's entry must be gone from every write planned a lease_ttl after another process first
saw it as last written."""

from __future__ import annotations

from support.history.hold_checker import SETTLE_S, Write, recovery

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
