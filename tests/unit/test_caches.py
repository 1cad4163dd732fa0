"""The in-process caches keep bounded memory however many entities a process meets."""

from __future__ import annotations

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
