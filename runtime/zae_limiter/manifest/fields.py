"""Checking a manifest's structure (docs/manifest.md): mappings, YAML scalars, and the problems
collected so that a manifest reports all of them, each at its path."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from ..errors import ValidationError
from .model import ManifestError
from .source import join_path

T = TypeVar("T")


class Problems:
    """Collects the problems of independent parts, so that a manifest reports all of them."""

    def __init__(self) -> None:
        self.errors: list[ManifestError] = []

    def check(self, part: Callable[[], Any]) -> Any:
        try:
            return part()
        except ManifestError as error:
            self.errors.extend(error.errors)
            return None

    def raise_any(self) -> None:
        if self.errors:
            raise ManifestError.several(self.errors)


def mapping(value: Any, path: str, allowed: tuple[str, ...] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestError(path, f"must be a mapping, not {kind(value)}", value)
    for key in value:
        if not isinstance(key, str):
            raise ManifestError(join_path(path, key), "keys must be strings (quote it)", key)
        if allowed is not None and key not in allowed:
            raise ManifestError(
                join_path(path, key), f"unknown key; expected one of: {', '.join(allowed)}"
            )
    return value


def kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(path, f"must be a YAML integer, not {kind(value)}", value)
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ManifestError(path, f"must be true or false, not {kind(value)}", value)
    return value


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ManifestError(path, f"must be a string, not {kind(value)}", value)
    return value


def known(raw: Any, path: str, allowed: tuple[str, ...], build: Callable[[dict[str, Any]], T]) -> T:
    """`build` from the mapping's known keys; each unknown key is reported beside whatever
    `build` finds wrong (a misspelt key never hides the mistakes next to it)."""
    fields = mapping(raw, path)
    problems = Problems()
    problems.errors += [
        ManifestError(join_path(path, key), f"unknown key; expected one of: {', '.join(allowed)}")
        for key in fields
        if key not in allowed
    ]
    built = problems.check(partial(build, {k: v for k, v in fields.items() if k in allowed}))
    problems.raise_any()
    return built  # type: ignore[no-any-return]


def checked(path: str, check: Callable[[], Any]) -> Any:
    """Run a library check, reporting its error at `path`."""
    try:
        return check()
    except ManifestError:
        raise
    except ValidationError as exc:
        raise ManifestError(path, str(exc), exc.value) from None
