"""Library and schema versions, and the one verdict on a table's version record (docs/versions.md).

`assess` is the only place that compares versions: opening a repository, `version`, `check`,
`upgrade` (and its dry run) and the feature gates all read their answer from its `Verdict`, so
they can never disagree. Versions are PEP 440 (`packaging`): `0.17.0rc1` sorts before `0.17.0`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass

from packaging.version import InvalidVersion, Version

from .schema import SCHEMA_VERSION

LIBRARY_VERSION = "0.18.0"

UPGRADE_HINT = "run `zae-limiter upgrade`"
NEWER_LIBRARY = "upgrade never downgrades; install a newer zae-limiter (pip install -U zae-limiter)"


def parse(version: object) -> Version:
    """A PEP 440 version; missing or unreadable versions count as 0 (older than any release)."""
    if not version:
        return Version("0")
    try:
        return Version(str(version))
    except InvalidVersion:
        return Version("0")


def at_least(version: object, required: str) -> bool:
    return parse(version) >= parse(required)


def _minor(version: Version) -> tuple[int, int]:
    release = (*version.release, 0)
    return release[0], release[1]


@dataclass(frozen=True)
class Verdict:
    """What a table's version record means for this library, and what `upgrade` would do.

    `ok`: the library may use the table (else `problem` and `message` say why). `refusal` and
    `refusal_kind`: why `upgrade` must not run (empty: it may). `migrate_schema` and `push_code`:
    what it would change. `aggregator_older`: features needing a newer aggregator are refused
    until `remedy` is done; `can_auto_update` says whether `upgrade` can do it.
    """

    _: KW_ONLY
    ok: bool
    problem: str = ""  # "client_too_old", "schema_major", "schema_older", "schema_newer"
    message: str = ""
    can_auto_update: bool = False
    aggregator_older: bool = False
    refusal_kind: str = ""  # problem, "stack_newer" or "aggregator_unmanaged"
    refusal: str = ""
    migrate_schema: bool = False
    push_code: bool = False
    remedy: str = UPGRADE_HINT


def assess(
    record: Mapping[str, object],
    library: str = LIBRARY_VERSION,
    target_schema: str = SCHEMA_VERSION,
    *,
    force: bool = False,
    table: str = "",
) -> Verdict:
    """The verdict on `record` for `library` (whose schema is `target_schema`). Pure.

    `force`: `upgrade --force` would re-push the aggregator's code even at the same version.
    """
    mine = parse(library)
    schema = str(record.get("schema_version") or "0")
    theirs, ours = parse(schema), parse(target_schema)
    minimum = record.get("client_min_version")
    aggregator = record.get("aggregator_version")
    function = record.get("aggregator_function") or None
    deploy = f"redeploy the stack with `cdk deploy` using zae-limiter {library}"

    if minimum and mine < parse(minimum):
        text = f"zae-limiter {library} is older than this table's minimum client version {minimum}"
        return Verdict(
            ok=False,
            problem="client_too_old",
            message=f"{text}; upgrade the library (pip install -U zae-limiter)",
            refusal_kind="client_too_old",
            refusal=f"{text}; {NEWER_LIBRARY}",
            remedy="upgrade the library",
        )
    if theirs.major != ours.major:
        return Verdict(
            ok=False,
            problem="schema_major",
            message=f"table schema {schema} is incompatible with this library's schema "
            f"{target_schema}",
            refusal_kind="schema_major",
            refusal=f"table schema {schema} and this library's schema {target_schema} differ in "
            "major version: upgrade cannot migrate across a major version",
            remedy="use a zae-limiter release of the table's schema major version",
        )
    if _minor(theirs) > _minor(ours):
        return Verdict(
            ok=False,
            problem="schema_newer",
            message=f"table schema {schema} is newer than this library supports ({target_schema}); "
            "upgrade the library",
            refusal_kind="schema_newer",
            refusal=f"table schema {schema} is newer than this library's {target_schema}; "
            f"{NEWER_LIBRARY}",
            remedy="upgrade the library",
        )
    older = aggregator is not None and parse(aggregator) < mine
    kind = refusal = ""
    if theirs > ours:  # a later patch of this minor: usable, but upgrade would downgrade it
        kind = "stack_newer"
        refusal = f"table schema {schema} is newer than this library's {target_schema}; "
    elif aggregator is not None and parse(aggregator) > mine:
        kind = "stack_newer"
        refusal = f"the stack's aggregator {aggregator} is newer than zae-limiter {library}; "
    elif older and function is None:
        kind = "aggregator_unmanaged"
        refusal = (
            f"table {table or '?'} records aggregator {aggregator} but no aggregator function, "
            f"so upgrade cannot replace its code with {library}; {deploy}"
        )
    if kind == "stack_newer":
        refusal += NEWER_LIBRARY
    problem = message = ""
    if _minor(theirs) < _minor(ours):
        problem = "schema_older"
        message = f"table schema {schema} is older than the library's {target_schema}; " + (
            refusal or UPGRADE_HINT
        )
    return Verdict(
        ok=not problem,
        problem=problem,
        message=message,
        can_auto_update=not refusal,
        aggregator_older=older,
        refusal_kind=kind,
        refusal=refusal,
        migrate_schema=not refusal and theirs < ours,
        push_code=not refusal and function is not None and (force or aggregator is None or older),
        remedy=deploy if kind == "aggregator_unmanaged" else UPGRADE_HINT,
    )


def compare(record: Mapping[str, object], library: str = LIBRARY_VERSION) -> Verdict:
    """The verdict for opening a repository (same as `assess`)."""
    return assess(record, library)
