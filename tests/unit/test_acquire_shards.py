"""Write sharding rules on the in-memory bucket IO: shard choice, retries on other shards,
the split detector and the split transaction."""

from __future__ import annotations

import random
from dataclasses import replace

from support.acquire_env import NS, AcquireEnv
from support.memory_bucket_io import Fault
from zae_limiter.acquire.shards import MIN_SHARDS_TRIED, SplitDetector
from zae_limiter.core.bucket import MILLI
from zae_limiter.dynamo import keys


def test_a_call_is_placed_off_shards_known_to_be_short() -> None:
    env = AcquireEnv()
    stamp = env.stamp(shards=4)
    for shard in (0, 1, 2):
        env.images.put(env.stored(shard=shard, stamp=stamp, states=env.drained()), env.clock())
    target = env.target(env.stored(shard=0, stamp=stamp, states=env.drained()), {"rpm": 1})
    for seed in range(20):
        random.seed(seed)
        assert env.admission.shards.place(target).image.shard == 3


def test_a_refused_shard_moves_the_call_to_at_most_three_shards() -> None:
    env = AcquireEnv()
    target = env.target(env.stored(stamp=env.stamp(shards=8)), {"rpm": 1})
    now = env.clock()
    seen = {target.image.shard}
    for _ in range(MIN_SHARDS_TRIED - 1):
        moved = env.admission.shards.another(target, now)
        assert moved is not None and moved.image.shard not in seen
        seen.add(moved.image.shard)
        target = moved
    assert env.admission.shards.another(target, now) is None
    assert len(seen) == MIN_SHARDS_TRIED


def test_an_unsharded_bucket_never_moves() -> None:
    env = AcquireEnv()
    target = env.target(env.stored(), {"rpm": 1})
    assert env.admission.shards.another(target, env.clock()) is None


async def test_a_short_shard_read_in_this_call_sends_the_debit_to_another_shard() -> None:
    env = AcquireEnv()
    stamp = env.stamp(shards=2)
    drained = env.stored(shard=0, stamp=stamp, states=env.drained())
    env.stored(shard=1, stamp=stamp)
    target = replace(env.target(drained, {"rpm": 1}), tried=frozenset({0}))
    await env.admission.debit([target], local_ok=False)
    assert env.state(shard=1).consumed == 1 * MILLI
    assert env.state(shard=0).consumed == 10 * MILLI  # untouched


async def test_a_local_rejection_needs_every_tried_shard_short() -> None:
    env = AcquireEnv()
    stamp = env.stamp(shards=2)
    for shard in (0, 1):
        env.images.put(env.stored(shard=shard, stamp=stamp, states=env.drained()), env.clock())
    first = env.bucket_io.image(keys.bucket(NS, "u1", "search", 0))
    assert first is not None
    target = env.target(first, {"rpm": 1})
    short, _ = env.admission.shards.short_everywhere(target, env.clock())
    assert short
    env.stored(shard=1, stamp=stamp)
    env.images.put(env.stored(shard=1, stamp=stamp), env.clock())  # shard 1 refilled
    short, moved = env.admission.shards.short_everywhere(target, env.clock())
    assert not short and moved.image.shard == 1


def test_the_split_detector_flags_a_shard_writing_faster_than_the_threshold() -> None:
    env = AcquireEnv()
    detector = SplitDetector()
    detector.threshold = 10
    image = env.stored()
    assert not detector.too_hot(replace(image, writes=0, written_at=0))
    assert not detector.too_hot(replace(image, writes=5, written_at=500))  # span not over
    assert detector.too_hot(replace(image, writes=30, written_at=1_000))  # 30 writes/s
    assert not detector.too_hot(replace(image, writes=35, written_at=2_000))  # 5 writes/s


async def test_a_split_doubles_the_shards_and_keeps_the_total_balance() -> None:
    env = AcquireEnv()
    image = env.stored()
    await env.admission.debit([env.target(image, {"rpm": 4})], local_ok=True)
    assert await env.admission.split("u1", "search", 1) == 2
    total = env.balance(shard=0) + env.balance(shard=1)
    assert 5 <= total <= 6  # 6 left, at most one milli-unit per shard lost to rounding
    zero = env.bucket_io.image(keys.bucket(NS, "u1", "search", 0))
    assert zero is not None and zero.stamp.shards == 2 and zero.stamp_seq == image.stamp_seq + 1
    assert env.state(shard=0).consumed == 4 * MILLI  # usage stays where it was counted


async def test_a_split_that_meets_a_concurrent_change_reads_again() -> None:
    env = AcquireEnv()
    env.stored()
    env.bucket_io.inject(Fault.CONDITION_FAILED, operation="split")
    assert await env.admission.split("u1", "search", 1) == 2
    assert [c.operation for c in env.bucket_io.calls] == ["read", "split", "read", "split"]


async def test_a_split_of_a_bucket_already_split_elsewhere_does_nothing() -> None:
    env = AcquireEnv()
    env.stored(stamp=env.stamp(shards=2))
    assert await env.admission.split("u1", "search", 1) == 2
    assert [c.operation for c in env.bucket_io.calls] == ["read"]
