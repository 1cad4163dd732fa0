"""Reading a manifest's YAML: safely, noting where every key is written (line and column) and
every key written twice, so that parse.py reports each problem at `file:line:column`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from .model import ManifestError


class _Loader(yaml.SafeLoader):
    """SafeLoader refusing a key written twice in one mapping (merged keys may be overridden),
    keeping the composed node tree so that errors can name their line."""

    def compose_document(self) -> Any:
        self.get_event()  # type: ignore[no-untyped-call]  # DocumentStartEvent
        node = self.compose_node(None, None)  # type: ignore[arg-type]
        self.get_event()  # type: ignore[no-untyped-call]  # DocumentEndEvent
        self.anchors = {}
        self.last_root = node
        return node


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    """As SafeLoader's (the last value wins), noting each key written twice in this mapping
    (merged keys may be overridden) so that it is reported with every other problem, and each
    copy's place among its key's copies, so that the earlier copies are checked too."""
    seen: dict[Any, list[yaml.Node]] = {}
    duplicates: dict[int, yaml.Node] = loader.__dict__.setdefault("duplicates", {})
    copies: dict[int, tuple[int, int]] = loader.__dict__.setdefault("copies", {})
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, str | int | float | bool):
            if key in seen:
                duplicates[id(key_node)] = seen[key][0]
            seen.setdefault(key, []).append(key_node)
    for nodes in seen.values():
        if len(nodes) > 1:
            for index, key_node in enumerate(nodes):
                copies[id(key_node)] = (index, len(nodes))
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, source: str = "manifest") -> Any:
    """Parse YAML safely; a syntax error or a key written twice is a ManifestError naming the
    line and column."""
    loaded = load_with_lines(text, source)
    if loaded.problems:
        raise ManifestError.several(locate(loaded.problems, source))
    return loaded.document


#: Where a path's key is written: (line, column), both 1-based.
Lines = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Loaded:
    """A manifest's YAML: the document (the last copy of a key written twice wins), where each
    path's key is written in it, the keys written twice, and `shadowed`: the document as it
    would be with the earlier copies of such keys instead (document, lines), so that a mistake
    in a copy that does not win is reported too."""

    document: Any
    lines: Lines
    problems: list[ManifestError]
    shadowed: list[tuple[Any, Lines]] = field(default_factory=list)


def load_with_lines(text: str, source: str) -> Loaded:
    """The document; where each path's key is written (the anchor's own lines for whatever an
    alias or a merge key brings in); the keys written twice; the shadowed documents."""
    loader = _Loader(text)
    try:
        document = loader.get_single_data()
        root = getattr(loader, "last_root", None)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        error = ManifestError("", f"not valid YAML: {what}")
        if mark is not None:
            error.line, error.column = mark.line + 1, mark.column + 1
        raise ManifestError.several(locate([error], source)) from None
    except yaml.YAMLError as exc:
        raise ManifestError("", f"{source or 'the manifest'} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    lines: Lines = {}
    problems: list[ManifestError] = []
    shadowed: list[tuple[Any, Lines]] = []
    if root is not None:
        duplicates = loader.__dict__.get("duplicates", {})
        _record_lines(root, "", lines, _Twice(duplicates, problems, set()))
        copies: dict[int, tuple[int, int]] = loader.__dict__.get("copies", {})
        for index in range(max((total for _, total in copies.values()), default=1) - 1):
            tree = _with_copy(root, copies, index)
            shadow_lines: Lines = {}
            _record_lines(tree, "", shadow_lines, _Twice({}, [], set()))
            shadowed.append((SafeConstructor().construct_document(tree), shadow_lines))
    return Loaded(document, lines, problems, shadowed)


def _with_copy(root: yaml.Node, copies: dict[int, tuple[int, int]], index: int) -> yaml.Node:
    """A copy of the (merged) node tree keeping, of each key written several times, its copy
    number `index` (or its last) and dropping the others."""
    tree: yaml.Node = copy.deepcopy(root)
    for node, original in zip(_mappings(tree), _mappings(root), strict=True):
        kept = []
        for (key, value), (original_key, _) in zip(node.value, original.value, strict=True):
            place = copies.get(id(original_key))
            if place is None or place[0] == min(index, place[1] - 1):
                kept.append((key, value))
        node.value = kept
    return tree


def _mappings(root: yaml.Node) -> list[yaml.MappingNode]:
    """Every mapping node of a tree, each once, in a fixed order (aliases shared)."""
    out: list[yaml.MappingNode] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            out.append(node)
            stack.extend(value for _, value in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(reversed(node.value))
    return out


class _Twice:
    """The keys written twice (by id of their node, to the first one), and what was reported."""

    def __init__(
        self, duplicates: dict[int, yaml.Node], problems: list[ManifestError], seen: set[int]
    ) -> None:
        self.duplicates, self.problems, self.seen = duplicates, problems, seen

    def note(self, key: yaml.Node, path: str) -> None:
        first = self.duplicates.get(id(key))
        if first is None or id(key) in self.seen:
            return
        self.seen.add(id(key))  # once, however many aliases bring it in
        error = ManifestError(
            path, f"duplicate key {key.value!r} (first at line {first.start_mark.line + 1})"
        )
        error.line, error.column = key.start_mark.line + 1, key.start_mark.column + 1
        self.problems.append(error)


def _record_lines(node: yaml.Node, path: str, lines: Lines, twice: _Twice) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:  # merge keys were flattened in by the constructor
            if not isinstance(key, yaml.ScalarNode):
                continue
            child = join_path(path, key.value)
            twice.note(key, child)
            # the last copy wins, as in the document (an explicit key over a merged one)
            lines[child] = (key.start_mark.line + 1, key.start_mark.column + 1)
            _record_lines(value, child, lines, twice)
    elif isinstance(node, yaml.SequenceNode):
        for index, value in enumerate(node.value):
            child = f"{path}[{index}]"
            lines.setdefault(child, (value.start_mark.line + 1, value.start_mark.column + 1))
            _record_lines(value, child, lines, twice)


def locate(
    errors: list[ManifestError], source: str, lines: Lines | None = None
) -> list[ManifestError]:
    """Each error with its source and, when it has none yet, the line and column of the nearest
    enclosing key; sorted by where they are in the file."""
    for problem in errors:
        if problem.line is None and lines is not None:
            path = problem.path
            while path and path not in lines:  # the nearest enclosing key that has a line
                path = path.rpartition(".")[0] if "." in path else ""
            problem.line, problem.column = lines.get(path, (None, None))
        problem.source = source
        if source:  # a file: messages start with file:line:column
            problem.args = (problem.located(),)
    return sorted(errors, key=lambda e: (e.line or 0, e.column or 0, e.path))


def join_path(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)
