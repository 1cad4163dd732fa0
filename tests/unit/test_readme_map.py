"""The README's "Where things are" table matches the tree (issue 46).

Every path it names exists, and it names every package and top-level module of the runtime, and
every module of the packages whose modules it lists one by one (`LISTED`). A name inside the
parentheses after a folder (`core/` (`bucket.py`, ...)) is that folder's when the folder has it;
otherwise a path is the runtime's (`acquire/deadlines.py`), or the repository's when it starts
with a folder of the repository (`tests/support/history/`).
"""

from __future__ import annotations

import re
from pathlib import Path

import zae_limiter

RUNTIME = Path(zae_limiter.__file__).parent
REPO = RUNTIME.parent.parent
#: Packages whose every module the table names (the others are named as a whole: the shells).
LISTED = ("acquire", "admin", "alerts", "core", "dynamo", "integrations", "manifest", "usage")
_TOKEN = re.compile(r"`([^`]+)`|(\()|(\))")


def table(readme: str) -> list[str]:
    """The rows of the "Where things are" table."""
    section = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def _is_path(token: str) -> bool:
    return " " not in token and (token.endswith((".py", ".pyi", "/")))


def named_paths(row: str) -> list[Path]:
    """The paths one row names, resolved as the module docstring says."""
    out: list[Path] = []
    folders: list[Path | None] = []  # the folder each open parenthesis belongs to
    last: Path | None = None  # a folder token just seen (a parenthesis may follow)
    for match in _TOKEN.finditer(row):
        token, opened, closed = match.groups()
        if opened:
            folders.append(last)
            last = None
            continue
        if closed:
            if folders:
                folders.pop()
            continue
        last = None
        if not _is_path(token):
            continue
        inside = next((f for f in reversed(folders) if f is not None), None)
        top = token.split("/")[0]
        in_repo = (REPO / top).is_dir() and top != "zae_limiter"
        outside = (REPO if in_repo else RUNTIME) / token
        candidates = ([inside / token] if inside is not None else []) + [outside]
        path = next((c for c in candidates if c.exists()), candidates[0])
        out.append(path)
        if token.endswith("/"):
            last = path
    return out


def _map() -> list[Path]:
    rows = table((REPO / "README.md").read_text(encoding="utf-8"))
    return [path for row in rows for path in named_paths(row)]


def test_a_bare_name_in_a_folders_parentheses_is_that_folders() -> None:
    row = "| x | `core/` (pure: `bucket.py`), `limiter.py`, `acquire/deadlines.py`, `tests/unit/` |"
    assert named_paths(row) == [
        RUNTIME / "core/",
        RUNTIME / "core" / "bucket.py",
        RUNTIME / "limiter.py",
        RUNTIME / "acquire/deadlines.py",
        REPO / "tests/unit/",
    ]


def test_every_path_the_map_names_exists() -> None:
    missing = sorted(str(path.relative_to(REPO)) for path in _map() if not path.exists())
    assert missing == [], "the README names paths that are not in the tree"


def test_the_map_names_every_package_and_module_of_note() -> None:
    named = {path.resolve() for path in _map()}
    wanted = [
        path
        for path in sorted(RUNTIME.iterdir())
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and not path.name.startswith("_"))
    ]
    wanted += [
        path
        for package in LISTED
        for path in sorted((RUNTIME / package).glob("*.py"))
        if not path.name.startswith("_")
    ]
    unnamed = [str(path.relative_to(RUNTIME)) for path in wanted if path.resolve() not in named]
    assert unnamed == [], "name them in the README's 'Where things are' table"
