"""The docs runner: extract Python examples from pages, run them on a fresh table, check prints.

Two page formats:

* Markdown (`docs/**/*.md`): every ```python (or ```py) fence is a block. A fence preceded by the
  line `<!-- docs: skip -->` (blank lines between are fine) is a fragment and is not run.
* The spec's seed pages (plain text exported from the docs site, no fences): a block is a run of
  paragraphs whose first line looks like Python (`await `, `async with`, `from x import`,
  `import `, `try:`, `def `, `for `, `NAME = `, `print(`, `# comment`, ...) up to the next prose
  paragraph; paragraphs of a block are joined back with their blank lines. The YAML manifest
  starts at a `namespace:` line and is extracted separately.

Running a block (the spec README's convention): the block is compiled with top-level `await`
allowed, on its own fresh table in the `default` namespace, with `repo` (Repository.open),
`limiter` (RateLimiter(repo)), `Limit` and `RateLimitExceeded` already defined. Line numbers in
tracebacks are the page's own.

Checking prints: every `print(...)  # value` must print that value:
* equal to the comment, or the comment starts with the printed text followed by `:` (the rest
  explains it: `# 25000000: the free $5 plus the $20 purchase`);
* `# about VALUE` allows 0.1 % on every number (plain numbers, dicts/lists/tuples of numbers);
* a comment that gives no value (it starts with a word such as "until") needs a printed number;
* a commented print that never ran is a failure.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import io
import math
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKIP_MARKER = "<!-- docs: skip -->"
#: A comment starting with one of these words describes the value instead of giving it.
DESCRIPTIVE_WORDS = frozenset({"until", "when", "after", "how", "seconds", "whatever"})
ABOUT_TOLERANCE = 1e-3

_FENCE_OPEN = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(\w+)?")
_CODE_START = re.compile(
    r"""^(
        await\s | async\s+(with|for|def)\s | from\s+[\w.]+\s+import\s | import\s |
        try: | def\s | class\s | for\s | while\s | if\s | with\s | print\( | @\w | \#
        | [A-Za-z_][\w.]*(\[[^\]]*\])?\s*(=|\+=|-=|\*=)\s
        | [A-Za-z_][\w.]*\(.*\)\s*$
    )""",
    re.X,
)
_YAML_LINE = re.compile(r"^\s*([\w.<-]+\s*:|-\s|#)")


@dataclass(frozen=True)
class CodeBlock:
    """One example block of a page."""

    path: Path
    index: int  # 1-based among the page's Python blocks
    line: int  # 1-based line of the block's first line in the page
    source: str
    skip: bool = False

    @property
    def id(self) -> str:
        return f"{self.path.stem}#{self.index}"

    def padded_source(self) -> str:
        """The source preceded by blank lines, so that line numbers match the page."""
        return "\n" * (self.line - 1) + self.source


# --- extraction -------------------------------------------------------------------------------


def markdown_python_blocks(path: Path) -> list[CodeBlock]:
    """Every ```python block of a Markdown page, marked skip when `<!-- docs: skip -->` precedes."""
    lines = path.read_text().splitlines()
    blocks: list[CodeBlock] = []
    i = 0
    last_text = ""
    while i < len(lines):
        match = _FENCE_OPEN.match(lines[i])
        if not match:
            if lines[i].strip():
                last_text = lines[i].strip()
            i += 1
            continue
        indent, fence, lang = match.group(1), match.group(2), (match.group(3) or "").lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        if lang in ("python", "py", "python3"):
            blocks.append(
                CodeBlock(
                    path=path,
                    index=len(blocks) + 1,
                    line=i + 2,
                    source="\n".join(body) + "\n",
                    skip=last_text == SKIP_MARKER,
                )
            )
        last_text = ""
        i = j + 1
    return blocks


def _paragraphs(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(first line index, lines) of each run of non-blank lines."""
    out: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 0
    for i, line in enumerate(lines):
        if line.strip():
            if not current:
                start = i
            current.append(line)
        elif current:
            out.append((start, current))
            current = []
    if current:
        out.append((start, current))
    return out


def _looks_like_code(paragraph: list[str]) -> bool:
    first = paragraph[0]
    if first[:1].isspace():  # an indented continuation (a function body after a blank line)
        return True
    if not _CODE_START.match(first):
        return False
    if first.startswith("#"):  # a comment paragraph must lead into code
        return any(not line.lstrip().startswith("#") for line in paragraph)
    return True


def _parses(source: str) -> bool:
    try:
        compile(source, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return False
    return True


def seed_python_blocks(path: Path) -> list[CodeBlock]:
    """Python blocks of a seed page (plain text with unfenced code)."""
    lines = path.read_text().splitlines()
    paragraphs = _paragraphs(lines)
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(paragraphs):
        start, paragraph = paragraphs[i]
        if not _looks_like_code(paragraph) or paragraph[0][:1].isspace():
            i += 1
            continue
        end_index = i
        j = i + 1
        while j < len(paragraphs) and _looks_like_code(paragraphs[j][1]):
            end_index = j
            j += 1
        last_start, last_lines = paragraphs[end_index]
        source = "\n".join(lines[start : last_start + len(last_lines)]) + "\n"
        if _parses(source):
            blocks.append(
                CodeBlock(path=path, index=len(blocks) + 1, line=start + 1, source=source)
            )
        i = end_index + 1
    return blocks


def seed_yaml_manifest(path: Path) -> str | None:
    """The limits manifest of a seed page: from a `namespace:` line to the next prose paragraph."""
    lines = path.read_text().splitlines()
    paragraphs = _paragraphs(lines)
    for n, (start, paragraph) in enumerate(paragraphs):
        if not re.match(r"^namespace:\s*\S", paragraph[0]):
            continue
        end = start + len(paragraph)
        for next_start, next_paragraph in paragraphs[n + 1 :]:
            if not all(_YAML_LINE.match(line) for line in next_paragraph):
                break
            end = next_start + len(next_paragraph)
        return "\n".join(lines[start:end]) + "\n"
    return None


# --- print checking ---------------------------------------------------------------------------


@dataclass
class PrintSite:
    """A `print(...)` call with a `# value` comment."""

    first_line: int
    last_line: int
    comment: str
    outputs: list[str] = field(default_factory=list)


def print_sites(source: str) -> list[PrintSite]:
    """Every print call of the source that carries a trailing comment on its last line."""
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string[1:].strip()
    sites: list[PrintSite] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
        ):
            last = node.end_lineno or node.lineno
            if last in comments:
                sites.append(PrintSite(node.lineno, last, comments[last]))
    return sorted(sites, key=lambda s: s.first_line)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _leading_literal(text: str) -> Any:
    """The value a comment starts with: the shortest prefix (ending at `:`, a space or the end)
    that is a Python literal, e.g. "{'units': 999900}: debited ..." -> {'units': 999900}."""
    cuts = sorted({m.start() for m in re.finditer(r"[:\s]", text)} | {len(text)})
    for cut in cuts:
        value = _literal(text[:cut])
        if value is not None:
            return value
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def approx_equal(actual: Any, expected: Any, rel: float = ABOUT_TOLERANCE) -> bool:
    """Equal, with numbers (also inside dicts, lists, tuples) within `rel` of the expected."""
    if _is_number(actual) and _is_number(expected):
        if expected == 0:
            return bool(actual == 0)
        return bool(abs(actual - expected) <= rel * abs(expected))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            approx_equal(actual[k], expected[k], rel) for k in expected
        )
    if isinstance(actual, list | tuple) and isinstance(expected, list | tuple):
        return len(actual) == len(expected) and all(
            approx_equal(a, e, rel) for a, e in zip(actual, expected, strict=True)
        )
    return bool(actual == expected)


def check_printed(printed: str, comment: str) -> str | None:
    """None if `printed` satisfies the `# comment`, else the reason it does not."""
    text = printed.strip()
    expected = comment.strip()
    if text == expected:
        return None
    if text and expected.startswith(text) and expected[len(text) :].lstrip().startswith(":"):
        return None
    if expected.lower().startswith("about "):
        want = _leading_literal(expected[6:].strip())
        got = _literal(text)
        if want is None:
            return f"cannot read a value after 'about' in {comment!r}"
        if got is not None and approx_equal(got, want):
            return None
        return f"printed {text!r}, expected about {want!r} (within {ABOUT_TOLERANCE:.1%})"
    first_word = expected.split(maxsplit=1)[0].lower() if expected else ""
    if first_word in DESCRIPTIVE_WORDS:
        number = _literal(text)
        if _is_number(number) and math.isfinite(float(number)):
            return None
        return f"printed {text!r}; the comment {comment!r} gives no value, so a number was expected"
    return f"printed {text!r}, expected {expected!r}"


# --- running ----------------------------------------------------------------------------------


@dataclass
class BlockRun:
    """What running one block produced."""

    block: CodeBlock
    printed: list[tuple[int, str]] = field(default_factory=list)  # (page line, text)
    failures: list[str] = field(default_factory=list)

    @property
    def stdout(self) -> str:
        return "\n".join(text for _, text in self.printed)


def check_block_prints(run: BlockRun) -> list[str]:
    """Match every printed line to its print's comment; return the failures."""
    failures: list[str] = []
    source = run.block.padded_source()
    for site in print_sites(source):
        outputs = [t for line, t in run.printed if site.first_line <= line <= site.last_line]
        if not outputs:
            failures.append(
                f"{run.block.path.name}:{site.first_line}: print never ran (expected "
                f"{site.comment!r})"
            )
        for text in outputs:
            reason = check_printed(text, site.comment)
            if reason:
                failures.append(f"{run.block.path.name}:{site.first_line}: {reason}")
    return failures


async def run_block(
    block: CodeBlock,
    *,
    table: str,
    endpoint_url: str,
    extra_globals: dict[str, Any] | None = None,
    timeout: float = 120.0,
) -> BlockRun:
    """Run a block on an existing table (made by Repository.create_table) and check its prints.

    Exceptions raised by the block propagate (the test fails with the page's line numbers).
    """
    from zae_limiter import Limit, RateLimiter, RateLimitExceeded, Repository

    run = BlockRun(block)
    filename = f"{block.path}"
    builtin_print = print

    def capture(
        *args: Any,
        sep: str | None = " ",
        end: str | None = "\n",
        file: Any = None,
        flush: bool = False,
    ) -> None:
        if file is not None and file is not sys.stdout:
            builtin_print(*args, sep=sep, end=end, file=file, flush=flush)
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != filename:
            frame = frame.f_back  # type: ignore[assignment]
        line = frame.f_lineno if frame is not None else 0
        run.printed.append((line, (sep if sep is not None else " ").join(map(str, args))))

    repo = await Repository.open(table=table, endpoint_url=endpoint_url)
    limiter = RateLimiter(repo)
    namespace: dict[str, Any] = {
        "__name__": f"docs_{block.path.stem.replace('-', '_')}_{block.index}",
        "repo": repo,
        "limiter": limiter,
        "Limit": Limit,
        "RateLimitExceeded": RateLimitExceeded,
        "print": capture,
        **(extra_globals or {}),
    }
    try:
        code = compile(
            block.padded_source(), filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        )
        result = eval(code, namespace)  # running the documentation is the point
        if inspect.iscoroutine(result):
            await asyncio.wait_for(result, timeout)
    finally:
        await limiter.close()
        await repo.close()
    run.failures = check_block_prints(run)
    return run


async def run_block_on_fresh_table(
    block: CodeBlock, *, endpoint_url: str, region: str, table: str
) -> BlockRun:
    """Create `table` with Repository.create_table, run the block on it, delete the table."""
    from zae_limiter import Repository

    await Repository.create_table(table=table, endpoint_url=endpoint_url, region=region)
    try:
        return await run_block(block, table=table, endpoint_url=endpoint_url)
    finally:
        await Repository.delete_table(table=table, endpoint_url=endpoint_url, region=region)


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def docs_pages(root: Path | None = None) -> list[Path]:
    """Every Markdown page under docs/."""
    return sorted((root or repo_root()).joinpath("docs").rglob("*.md"))
