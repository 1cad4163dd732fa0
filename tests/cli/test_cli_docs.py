"""docs/cli.md holds exactly the generated command reference; docs/manifest.md's example is the
seed page's and passes `limits validate`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from support.docs import repo_root, seed_yaml_manifest
from test_spec_examples import MANIFEST_PAGE
from zae_limiter.cli import cli
from zae_limiter.cli.docgen import generate, generated_part
from zae_limiter.manifest import loads

DOCS = repo_root() / "docs"


def test_cli_reference_is_generated_from_the_commands() -> None:
    assert generated_part(DOCS / "cli.md") == generate(), (
        "docs/cli.md is out of date: run `python -m zae_limiter.cli.docgen docs/cli.md`"
    )


def test_every_command_is_documented() -> None:
    page = (DOCS / "cli.md").read_text()

    def walk(command: object, path: list[str]) -> list[str]:
        commands = getattr(command, "commands", None)
        if not commands:
            return [" ".join(path)]
        return [p for name, sub in commands.items() for p in walk(sub, [*path, name])]

    for name in walk(cli, ["zae-limiter"]):
        assert f"### `{name}`" in page


def manifest_page_blocks() -> list[str]:
    """The ```yaml blocks of docs/manifest.md (the first is the seed page's example)."""
    return re.findall(r"```yaml\n(.*?)```", (DOCS / "manifest.md").read_text(), re.S)


@pytest.mark.spec
def test_the_manifest_page_shows_the_seed_pages_manifest() -> None:
    seed = seed_yaml_manifest(MANIFEST_PAGE)
    assert seed is not None, f"the seed page's manifest was not found in {MANIFEST_PAGE}"
    assert loads(manifest_page_blocks()[0]) == loads(seed)  # comment added, same manifest


def test_manifest_page_examples(tmp_path: Path) -> None:
    blocks = manifest_page_blocks()
    for block in blocks[:2]:
        path = tmp_path / "limits.yaml"
        path.write_text(block)
        result = CliRunner().invoke(cli, ["limits", "validate", "-f", str(path)])
        assert result.exit_code == 0, result.stderr
