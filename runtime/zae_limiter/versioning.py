"""Library and schema versions, and the compatibility rules of reference.md §10.2."""

from __future__ import annotations

from dataclasses import dataclass

from .schema import SCHEMA_VERSION

LIBRARY_VERSION = "0.17.0"


def parse(version: str | None) -> tuple[int, ...]:
    if not version:
        return (0,)
    parts = []
    for piece in version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def at_least(version: str | None, required: str) -> bool:
    return parse(version) >= parse(required)


@dataclass(frozen=True)
class Verdict:
    """Outcome of comparing the library with a table's version record."""

    ok: bool
    problem: str = ""  # "client_too_old", "schema_major", "schema_older", "schema_newer"
    message: str = ""
    can_auto_update: bool = False
    aggregator_older: bool = False


def compare(record: dict[str, object], library: str = LIBRARY_VERSION) -> Verdict:
    schema = str(record.get("schema_version") or "0")
    minimum = record.get("client_min_version")
    aggregator = record.get("aggregator_version")
    if minimum and parse(library) < parse(str(minimum)):
        return Verdict(
            False,
            "client_too_old",
            f"zae-limiter {library} is older than this table's minimum client version "
            f"{minimum}; upgrade the library (pip install -U zae-limiter)",
        )
    mine, theirs = parse(SCHEMA_VERSION), parse(schema)
    if mine[0] != theirs[0]:
        return Verdict(
            False,
            "schema_major",
            f"table schema {schema} is incompatible with this library's schema {SCHEMA_VERSION}",
        )
    if theirs[:2] < mine[:2]:
        return Verdict(
            False,
            "schema_older",
            f"table schema {schema} is older than the library's {SCHEMA_VERSION}; "
            "run `zae-limiter upgrade`",
            can_auto_update=True,
        )
    if theirs[:2] > mine[:2]:
        return Verdict(
            False,
            "schema_newer",
            f"table schema {schema} is newer than this library supports ({SCHEMA_VERSION}); "
            "upgrade the library",
        )
    older = aggregator is not None and parse(str(aggregator))[:2] < parse(library)[:2]
    return Verdict(True, aggregator_older=older)
