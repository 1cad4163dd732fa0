"""The spec's seed pages run unchanged on the simulated MRSC table (docs/multi-region.md): every
Python block of the two pages, through a simulated Region's endpoint, prints what its comments
say, and no transaction reaches the table. Where the spec is (support/spec.py)."""

from __future__ import annotations

import pytest

from support.docs import CodeBlock, run_block_on_fresh_table
from support.regions import Regions
from support.tables import unique_table_name
from test_spec_examples import BLOCKS

pytestmark = pytest.mark.spec


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
async def test_seed_example_on_mrsc(block: CodeBlock, sim: Regions) -> None:
    region = sim.names[0]
    run = await run_block_on_fresh_table(
        block, endpoint_url=sim.url(region), region=region, table=unique_table_name("mrsc-seed")
    )
    assert not run.failures, "\n".join(run.failures) + f"\n--- printed:\n{run.stdout}"
    assert sim.total("transaction") == 0  # (the Regions are shared by the module's tests)
