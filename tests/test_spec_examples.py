"""The spec's seed pages run as acceptance tests, where the spec is (see support/spec.py).

Every Python block of the two seed pages is collected as its own test id
(`several-resources-in-one-acquire#2`, ...) and must run unchanged and print what its comments
say. Every id is listed in EXPECTED_BLOCKS, so a block the extractor misses is a failure. The
manifest block (`...#manifest`) goes through `zae-limiter limits validate`, `plan`, `apply`,
then `limits diff` must find no drift.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.docs import (
    CodeBlock,
    run_block_on_fresh_table,
    seed_python_blocks,
    seed_yaml_manifest,
)
from support.fixtures import REGION
from support.spec import spec_dir
from support.tables import unique_table_name

#: Every executable block of the two seed pages (the extractor must find exactly these).
EXPECTED_BLOCKS: set[str] = {
    "several-resources-in-one-acquire#1",
    "several-resources-in-one-acquire#2",
    "several-resources-in-one-acquire#3",
    "per-resource-limits-and-shared-budget#1",  # also=, quotas (weekly cron, session)
    "per-resource-limits-and-shared-budget#2",  # plans: reset_bucket, top_up
    "per-resource-limits-and-shared-budget#3",  # organisations and cascade
    "per-resource-limits-and-shared-budget#4",  # set_parent
    "per-resource-limits-and-shared-budget#5",  # usage summaries
    "per-resource-limits-and-shared-budget#6",  # cascade on a quota resource
    "per-resource-limits-and-shared-budget#7",  # soft limits
    "per-resource-limits-and-shared-budget#manifest",  # limits manifest CLI
}

SEED_PAGES = ("several-resources-in-one-acquire.md", "per-resource-limits-and-shared-budget.md")


pytestmark = pytest.mark.spec


def _blocks() -> list[CodeBlock]:
    folder = spec_dir()
    blocks: list[CodeBlock] = []
    for name in SEED_PAGES:
        if (folder / name).is_file():
            blocks += seed_python_blocks(folder / name)
    return blocks


BLOCKS = _blocks()
MANIFEST_PAGE = spec_dir() / "per-resource-limits-and-shared-budget.md"


def test_seed_pages_are_found_and_extracted() -> None:
    assert spec_dir().is_dir(), f"spec pages not found at {spec_dir()} (set ZAEL_SPEC_DIR)"
    ids = {block.id for block in BLOCKS}
    assert ids | {"per-resource-limits-and-shared-budget#manifest"} == EXPECTED_BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
async def test_seed_example(block: CodeBlock, ddb_endpoint: str) -> None:
    run = await run_block_on_fresh_table(
        block, endpoint_url=ddb_endpoint, region=REGION, table=unique_table_name("seed")
    )
    assert not run.failures, "\n".join(run.failures) + f"\n--- printed:\n{run.stdout}"


async def test_seed_manifest(ddb_endpoint: str, tmp_path: Path) -> None:
    manifest = seed_yaml_manifest(MANIFEST_PAGE)
    assert manifest is not None, "the manifest block was not found"
    from click.testing import CliRunner

    from zae_limiter import Repository
    from zae_limiter.cli import cli

    path = tmp_path / "limits.yaml"
    path.write_text(manifest)
    table = unique_table_name("manifest")
    await Repository.create_table(table=table, endpoint_url=ddb_endpoint, region=REGION)
    runner = CliRunner()
    common = ["--table", table, "--endpoint-url", ddb_endpoint]
    try:
        for args, code in (
            (["limits", "validate", "-f", str(path)], 0),
            ([*common, "limits", "plan", "-f", str(path)], 0),
            ([*common, "limits", "apply", "-f", str(path), "-y"], 0),
            ([*common, "limits", "diff", "-f", str(path)], 0),  # exit 3 would mean drift
        ):
            result = runner.invoke(cli, args)
            assert result.exit_code == code, f"{' '.join(args)}:\n{result.output}"
    finally:
        await Repository.delete_table(table=table, endpoint_url=ddb_endpoint, region=REGION)
