"""Printing results: aligned tables and `key: value` lines for people, JSON for scripts."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import click

from .app import Settings


def plain(value: Any) -> Any:
    """JSON-ready form of models, dataclasses, enums and containers."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):  # fixed point, never an exponent: 1619220, 12.5
        return f"{value:.2f}".rstrip("0").rstrip(".")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], headers: Sequence[str] | None = None
) -> str:
    """Columns aligned on the widest cell; numbers right-aligned."""
    titles = list(headers or [c.upper().replace("_", " ") for c in columns])
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(t)] + [len(r[i]) for r in cells]) for i, t in enumerate(titles)]
    numeric = [
        all(
            isinstance(row.get(c), int | float) and not isinstance(row.get(c), bool) for row in rows
        )
        and bool(rows)
        for c in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(titles), *(line(r) for r in cells)])


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """`key: value` lines, keys aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k + ':':<{width + 1}} {cell(v)}" for k, v in pairs)


def emit(settings: Settings, data: Any, human: str | None) -> None:
    """Print `data` as JSON with `-o json`, else the human text (nothing if None)."""
    if settings.json:
        click.echo(json.dumps(plain(data), indent=2, sort_keys=False, default=str))
    elif human is not None:
        click.echo(human)


def note(message: str) -> None:
    """Progress and notes go to stderr, so stdout stays parseable."""
    click.echo(message, err=True)
