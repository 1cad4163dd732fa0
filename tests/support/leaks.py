"""No test leaves a background aggregator running (it would poll the engine for the
rest of the run, and outlive pytest).

`leftover_aggregators()` lists this process's children whose command line is the aggregator's
(`python -m zae_limiter.local.stream_runner`); zombies count as gone.
"""

from __future__ import annotations

import os
from pathlib import Path

from zae_limiter.local.processes import AGGREGATOR_MARKER, process_cmdline


def _children(parent: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            children.append(int(stat.parent.name))
    return children


def leftover_aggregators(parent: int | None = None) -> dict[int, str]:
    """pid -> command line of each live aggregator process started by `parent` (default: us)."""
    if not Path("/proc").is_dir():
        return {}
    found = {}
    for pid in _children(os.getpid() if parent is None else parent):
        cmdline = process_cmdline(pid)
        if cmdline is not None and AGGREGATOR_MARKER in cmdline:
            found[pid] = cmdline
    return found
