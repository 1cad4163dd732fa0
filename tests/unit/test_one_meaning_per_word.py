"""One meaning per word in the package's names (issue 31; docs/contributing.md, "Words").

Each swept word names one thing. An identifier the package defines (a module, class, function,
parameter, variable, attribute or import alias) containing the word is allowed only in the
modules where that meaning lives, or when it is one of the word's names that travel (the spec's
and AWS's names, and the meaning's own names used by every holder of it). Anything else is a
second meaning and gets its own word. The names are split into words at `_` and case changes,
so `release` is not `lease` and `stored` (written through the `Store`) is not `store`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import zae_limiter

ROOT = Path(zae_limiter.__file__).parent


@dataclass(frozen=True)
class Word:
    meaning: str
    forms: frozenset[str]  # the word's own spellings, as whole words of a name
    homes: tuple[str, ...]  # modules (paths under the package; "dir/" for a folder)
    names: str  # names allowed anywhere (a full match): spec, AWS, the meaning's holders


WORDS = {
    "window": Word(
        "a usage-snapshot window (hourly, daily, monthly)",
        frozenset({"window", "windows", "windowed"}),
        (
            "usage/",
            "lambdas/aggregator/",
            "cdk/",
            "admin/usage.py",
            "dynamo/keys.py",
            "models.py",
            "cli/report_cmds.py",
        ),
        # spec: the snapshot fields and query bounds; AWS: the stream's batching window
        r"window_types?|window_start(_ms)?|window_end|(min|max)_window_start"
        r"|snapshot_windows|stream_max_batching_window_seconds",
    ),
    "config": Word(
        "the stored limit configuration at a level (system, resource, entity)",
        frozenset({"config", "configs", "configured", "configuration"}),
        (
            "config.py",
            "admin/config.py",
            "caches.py",
            "resolution.py",
            "acquire/dynamo_io.py",  # the config-read port on DynamoDB
            "repository.py",
            "unmetered.py",
            "dynamo/keys.py",
            "manifest/export.py",
            "cli/config_cmds.py",
            "cli/entity_cmds.py",
        ),
        # spec: the config cache and listing; botocore's client Config (AWS)
        r"config_cache_ttl|invalidate_config_cache|list_resources_with_entity_configs"
        r"|ConfigSource|_?(default_)?client_config",
    ),
    "lease": Word(
        "what acquire() yields (Lease), and a hold's lease (lease_ttl)",
        frozenset({"lease", "leases", "leased"}),
        (
            "acquire/lease.py",
            "acquire/acquisition.py",
            "lease.py",
            "lease_view.py",
            "sync.py",
            "sync_lease.py",
            "integrations/",
            "concurrent_limits.py",
            "demo.py",
        ),
        # spec: the public classes, the error, a concurrency limit's lease_ttl
        r"Lease|LeaseResource|SyncLease|SyncLeaseResource|LeaseExpiredError"
        r"|_?lease_ttl(_seconds)?|(DEFAULT|MIN|MAX)_LEASE_TTL_SECONDS",
    ),
    "store": Word(
        "the table request layer (dynamo.store.Store) and what holds one",
        frozenset({"store", "stores"}),
        ("dynamo/store.py",),
        r"Store|_?store",
    ),
    "split": Word(
        "a shard split (a bucket's shard count doubles)",
        frozenset({"split", "splits", "splitting"}),
        (
            "acquire/admission.py",
            "acquire/shards.py",
            "acquire/waves.py",
            "acquire/bucket_io.py",
            "acquire/dynamo_io.py",
            "acquire/split_items.py",  # a split one item at a time (docs/multi-region.md)
            "admin/sweeper.py",  # finishes splits left half done
            "core/shard_split.py",
            "dynamo/bucket_attributes.py",  # who writes an attribute: a split
            "core/shares.py",
            "manifest/plan.py",
        ),
        r"split_writes_per_second|SPLIT_WRITES_PER_SECOND",  # Repository.open's threshold
    ),
    "iso": Word(
        "an ISO-8601 UTC text of a time, in one of its two named precisions (core/times.py)",
        frozenset({"iso"}),
        ("core/times.py",),
        r"iso_millis|iso_seconds|from_iso_seconds",  # the two forms, named by their precision
    ),
    "deadlines": Word(
        "the callers' deadlines on one timer (acquire/deadlines.py `Deadlines`) and its holders",
        frozenset({"deadlines"}),
        ("acquire/deadlines.py",),
        r"deadlines",  # `Pending.deadlines`, and a caller's local name for it
    ),
}

# A class name names one thing: two modules defining a class of the same name are two meanings.
# Today's, each with the step that gives one of them another name (the list only shrinks).
SHARED_CLASS_NAMES: dict[str, str] = {}

_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[^A-Za-z]|$)|[A-Z]?[a-z]+|[A-Z]+|\d+")


def words_of(name: str) -> set[str]:
    """`RESEND_BOUND_MS` -> {resend, bound, ms}; `DynamoBucketIO` -> {dynamo, bucket, io}."""
    return {part.lower() for part in _PARTS.findall(name)}


def defined(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) for every name this module defines (not the names it only uses)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append((node.lineno, node.name))
        elif isinstance(node, ast.arg):
            out.append((node.lineno, node.arg))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.alias) and node.asname:
            out.append((node.lineno, node.asname))
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.append((node.lineno, node.name))
    return out


def _at_home(module: str, word: Word) -> bool:
    return any(
        module == home or (home.endswith("/") and module.startswith(home)) for home in word.homes
    )


def strays(module: str, source: str) -> list[str]:
    """`module:line: name (word)` for each name with a swept word outside its meaning."""
    found = []
    stems = module.removesuffix(".py").split("/")
    names = defined(ast.parse(source))
    for key, word in WORDS.items():
        if _at_home(module, word):
            continue
        # a module named with the word is a home; a name that travels may appear anywhere
        found += [f"{module}:0: {stem} ({key})" for stem in stems if words_of(stem) & word.forms]
        for line, name in names:
            if words_of(name) & word.forms and not re.fullmatch(word.names, name):
                found.append(f"{module}:{line}: {name} ({key})")
    return sorted(set(found), key=lambda text: int(text.split(":")[1]))


def test_words_are_cut_at_underscores_and_case_changes() -> None:
    assert words_of("RESEND_BOUND_MS") == {"resend", "bound", "ms"}
    assert words_of("DynamoBucketIO") == {"dynamo", "bucket", "io"}
    assert words_of("release_error") == {"release", "error"}
    assert "store" not in words_of("read_stored")


def test_a_stray_use_of_each_word_is_reported() -> None:
    source = (
        "from .lock import Lock as LeaseLock\n"
        "def in_window(now): ...\n"
        "class AggregatorConfig: ...\n"
        "def _split_name(spec): ...\n"
        "class BucketStore:\n"
        "    def read(self, *, lease_ttl, store):\n"
        "        self.window_type = lease_ttl\n"
    )
    assert strays("acquire/targets.py", source) == [
        "acquire/targets.py:1: LeaseLock (lease)",
        "acquire/targets.py:2: in_window (window)",
        "acquire/targets.py:3: AggregatorConfig (config)",
        "acquire/targets.py:4: _split_name (split)",
        "acquire/targets.py:5: BucketStore (store)",
    ]
    # module names count too, and a word's home is only where its meaning lives
    assert strays("acquire/store.py", "") == ["acquire/store.py:0: store (store)"]
    assert strays("core/shard_split.py", "def split_limit(): ...\n") == []
    assert strays("usage/windows.py", "WINDOWS = ()\n") == []


def test_every_swept_word_has_one_meaning_in_the_package() -> None:
    found = [
        stray
        for path in sorted(ROOT.rglob("*.py"))
        for stray in strays(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
    ]
    assert found == [], "\n".join(found)


def classes(source: str) -> list[str]:
    """The public classes a module defines at its top level."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
    ]


def test_a_class_name_names_one_thing() -> None:
    """Issue 46: `Call`, `Outcome`, `Target`, `Level`, `Pending`, `Aggregator` each meant two
    things (now `BalanceCall`, `BatchResult`, `Subject`, `LevelSpec`, `RecordToApply`,
    `AggregatorFunction` for the second)."""
    where: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        for name in classes(path.read_text(encoding="utf-8")):
            where.setdefault(name, []).append(path.relative_to(ROOT).as_posix())
    shared = {name: modules for name, modules in where.items() if len(modules) > 1}
    unlisted = {name: modules for name, modules in shared.items() if name not in SHARED_CLASS_NAMES}
    assert unlisted == {}, "one class name, two classes: name one of them for what it is"
    assert set(SHARED_CLASS_NAMES) - set(shared) == set(), "no longer shared: strike it"
