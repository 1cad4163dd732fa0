"""The docs runner: every ```python block in docs/**/*.md runs on a fresh table, prints checked.

A block preceded by `<!-- docs: skip -->` is a fragment and is skipped. See tests/support/docs.py
for the conventions (what is predefined, how `# value` comments are compared) and
docs/contributing.md for how to add an example.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.docs import (
    CodeBlock,
    check_printed,
    docs_pages,
    markdown_python_blocks,
    print_sites,
    run_block_on_fresh_table,
)
from support.fixtures import REGION
from support.tables import unique_table_name

BLOCKS: list[CodeBlock] = [block for page in docs_pages() for block in markdown_python_blocks(page)]
RUNNABLE = [b for b in BLOCKS if not b.skip]
FRAGMENTS = [b for b in BLOCKS if b.skip]


def _id(block: CodeBlock) -> str:
    return f"{block.path.name}#{block.index}"


@pytest.mark.parametrize("block", FRAGMENTS, ids=[_id(b) for b in FRAGMENTS])
def test_docs_fragment_is_valid_python(block: CodeBlock) -> None:
    """Blocks marked <!-- docs: skip --> need names they do not define; they must still parse."""
    import ast

    compile(block.source, str(block.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("block", RUNNABLE, ids=[_id(b) for b in RUNNABLE])
async def test_docs_example(block: CodeBlock, ddb_endpoint: str) -> None:
    run = await run_block_on_fresh_table(
        block, endpoint_url=ddb_endpoint, region=REGION, table=unique_table_name("docs")
    )
    assert not run.failures, "\n".join(run.failures) + f"\n--- printed:\n{run.stdout}"


# --- the runner's own rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("printed", "comment"),
    [
        ("('search', 'budget')", "('search', 'budget')"),
        ("budget units", "budget units"),
        ("25000000", "25000000: the free $5 plus the $20 purchase"),
        ("['weekly']", "['weekly']: admitted, and over the allowance"),
        ("{'units': 999900}", "about {'units': 999900}: debited on search, and only on units"),
        ("{'units': 999000.5}", "about {'units': 999900}: debited"),  # within 0.1 %
        ("999.5", "about 1000"),
        ("59.98", "until every resource can admit"),
        ("{'weekly': 9000, 'session': 9000}", "{'weekly': 9000, 'session': 9000}"),
    ],
)
def test_check_printed_accepts(printed: str, comment: str) -> None:
    assert check_printed(printed, comment) is None


@pytest.mark.parametrize(
    ("printed", "comment"),
    [
        ("('search',)", "('search', 'budget')"),
        ("search units", "budget units"),
        ("2500000", "25000000: the free $5 plus the $20 purchase"),
        ("{'units': 998000}", "about {'units': 999900}: debited on search"),
        ("{'units': 999900, 'requests': 59}", "about {'units': 999900}"),
        ("998", "about 1000"),
        ("soon", "until every resource can admit"),
        ("budget", "budget units"),
    ],
)
def test_check_printed_rejects(printed: str, comment: str) -> None:
    assert check_printed(printed, comment) is not None


def test_markdown_extraction_and_skip_marker(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nText.\n\n```python\nx = 1\nprint(x)  # 1\n```\n\n"
        "<!-- docs: skip -->\n\n```python\nlease.adjust(...)\n```\n\n"
        "```bash\nmake test\n```\n\n```py\nprint(2)\n```\n"
    )
    blocks = markdown_python_blocks(page)
    assert [(b.index, b.line, b.skip) for b in blocks] == [
        (1, 6, False),
        (2, 13, True),
        (3, 21, False),
    ]
    assert blocks[0].source == "x = 1\nprint(x)  # 1\n"
    [site] = print_sites(blocks[0].padded_source())
    assert (site.first_line, site.comment) == (7, "1")
