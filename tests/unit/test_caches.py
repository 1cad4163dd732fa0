"""The in-process caches keep bounded memory however many entities a process meets."""

from __future__ import annotations

import logging

from zae_limiter.caches import CONFIG_CACHE_MAX_ENTRIES, ConfigCache


def test_config_cache_keeps_at_most_its_bound() -> None:
    cache = ConfigCache(ttl_seconds=60, max_entries=1_000)
    for i in range(25_000):
        cache.put(("unmetered", f"user-{i}", "search"), None, now=i)
    assert len(cache) == 1_000
    assert cache.get(("unmetered", "user-24999", "search"), now=25_000)[0]  # newest kept
    assert cache.peek(("unmetered", "user-0", "search")) is None  # oldest evicted


def test_config_cache_evicts_the_least_recently_used() -> None:
    cache = ConfigCache(ttl_seconds=60, max_entries=2)
    cache.put(("system",), "s", now=0)
    cache.put(("resource", "search"), "r", now=0)
    assert cache.get(("system",), now=1)[0]  # touch: now the newest
    cache.put(("entity", "user-1"), "e", now=1)
    assert cache.peek(("system",)) == "s"
    assert cache.peek(("resource", "search")) is None


def test_default_bound() -> None:
    assert ConfigCache(ttl_seconds=60).max_entries == CONFIG_CACHE_MAX_ENTRIES


async def test_turns_serialise_one_key_and_forget_it_when_unused() -> None:
    import asyncio

    from zae_limiter.caches import Turns

    turns = Turns()
    inside: list[int] = []
    most = 0

    async def one(i: int, key: str) -> None:
        nonlocal most
        async with turns.turn(key):
            inside.append(i)
            most = max(most, len(inside))
            await asyncio.sleep(0)
            inside.remove(i)

    await asyncio.gather(*(one(i, "entity-1") for i in range(20)))
    assert most == 1 and len(turns) == 0  # one at a time, and no lock left behind
    await asyncio.gather(one(1, "a"), one(2, "b"))
    assert len(turns) == 0


# --- every other per-entity memory of a process is bounded too --------------------------------


def test_bounded_dict_and_set_keep_at_most_their_bound() -> None:
    from zae_limiter.caches import BoundedDict, BoundedSet

    rates: BoundedDict[str, int] = BoundedDict(3)
    warned: BoundedSet[str] = BoundedSet(3)
    for i in range(10):
        rates[f"k{i}"] = i
        warned.add(f"k{i}")
    assert len(rates) == 3 and len(warned) == 3
    assert rates.get("k9") == 9 and rates.get("k0") is None  # the oldest set is evicted
    assert "k9" in warned and "k0" not in warned


def test_the_split_detector_tracks_a_bounded_number_of_shards() -> None:
    from zae_limiter.acquire.planning import blank_image
    from zae_limiter.acquire.shards import SplitDetector
    from zae_limiter.caches import TRACKED_MAX_ENTRIES
    from zae_limiter.core.bucket import MILLI, Kind, Params
    from zae_limiter.core.images import Stamp

    stamp = Stamp(
        limits=(Params("rpm", Kind.RATE, 10 * MILLI, 10 * MILLI, 60_000),),
        parent=None,
        cascade=False,
        shards=1,
    )
    detector = SplitDetector()
    for i in range(TRACKED_MAX_ENTRIES + 500):
        assert not detector.too_hot(blank_image("ns1", f"user-{i}", "search", stamp, 1))
    assert len(detector._rates) == TRACKED_MAX_ENTRIES


def test_warn_once_sets_are_bounded() -> None:
    import asyncio

    from zae_limiter.caches import TRACKED_MAX_ENTRIES
    from zae_limiter.unmetered import Unmetered

    async def none() -> list[str]:
        return []

    policy = Unmetered("allow", "default", none)

    async def admit_all() -> None:
        for i in range(TRACKED_MAX_ENTRIES + 500):
            await policy.admit(f"typo-{i}")

    logging.disable(logging.WARNING)
    try:
        asyncio.run(admit_all())
    finally:
        logging.disable(logging.NOTSET)
    assert len(policy._warned) == TRACKED_MAX_ENTRIES


def test_unmetered_counts_are_bounded_and_count_every_admission() -> None:
    import asyncio

    from zae_limiter.unmetered import COUNTED_RESOURCES, OTHER_RESOURCES, Unmetered

    async def none() -> list[str]:
        return []

    policy = Unmetered("allow", "default", none)
    names = [f"typo-{i}" for i in range(COUNTED_RESOURCES + 700)]

    async def admit_all() -> None:
        for name in names + names[:3] + names[-2:]:
            await policy.admit(name)

    logging.disable(logging.WARNING)
    try:
        asyncio.run(admit_all())
    finally:
        logging.disable(logging.NOTSET)
    assert len(policy.admissions) == COUNTED_RESOURCES + 1
    assert sum(policy.admissions.values()) == len(names) + 5  # none uncounted
    assert policy.admissions["typo-0"] == 2  # a counted name keeps its own count
    assert policy.admissions[OTHER_RESOURCES] == 700 + 2


def test_the_parent_fallback_warnings_are_bounded() -> None:
    from support.acquire_env import AcquireEnv
    from zae_limiter.caches import TRACKED_MAX_ENTRIES

    finder = AcquireEnv().admission.finder
    logging.disable(logging.WARNING)
    try:
        for i in range(TRACKED_MAX_ENTRIES + 500):
            finder._note_parent_fallback(f"org-{i}", "search")
    finally:
        logging.disable(logging.NOTSET)
    assert len(finder._warned_parent_fallback) == TRACKED_MAX_ENTRIES
