"""A transfer between two shards of a bucket on the in-memory bucket IO (docs/multi-region.md,
"Regional shards"): the units leave the donor and arrive at the recipient once, and the donor's
record of it goes. The whole flow across simulated Regions runs on DynamoDB Local
(tests/regions/test_regional_shards.py)."""

from __future__ import annotations

import pytest

from support.acquire_env import AcquireEnv
from zae_limiter.acquire.values import ItemChanged
from zae_limiter.core.bucket import MILLI
from zae_limiter.dynamo import keys


async def test_a_transfer_moves_its_units_once_and_leaves_no_record() -> None:
    env = AcquireEnv()
    stamp = env.stamp(shards=2)
    donor = env.stored(shard=1, stamp=stamp)
    recipient = env.stored(shard=0, stamp=stamp, states=env.drained())
    before = (env.balance(shard=1), env.balance(shard=0))
    transfers = env.admission.waves.transfers
    landed = await transfers._move(donor, recipient, {"rpm": 2 * MILLI}, env.clock())
    assert landed is not None and landed.incoming == {1: 1}
    assert (env.balance(shard=1), env.balance(shard=0)) == (before[0] - 2, before[1] + 2)
    given = env.bucket_io.image(keys.bucket(*donor.address))
    assert given is not None and given.outgoing == {} and given.transfers == 1
    assert [c.operation for c in env.bucket_io.writes()] == ["give", "take", "taken"]
    with pytest.raises(ItemChanged):  # the same number is never taken twice
        await env.bucket_io.take(landed, {}, 1, 1, now=env.clock())
