"""Every module of the runtime stays small: under 500 lines (one job per module)."""

from __future__ import annotations

from pathlib import Path

import zae_limiter

ROOT = Path(zae_limiter.__file__).parent
MAX_LINES = 500


def test_every_runtime_module_is_under_500_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in ROOT.rglob("*.py")
    }
    assert len(sizes) > 100  # the whole package was read
    too_long = {name: lines for name, lines in sizes.items() if lines >= MAX_LINES}
    assert too_long == {}, f"divide these modules (one job each): {too_long}"
