"""DynamoDB's expression language, evaluated on items in wire form, for the simulated table.

Condition, key-condition and update expressions are parsed once per text (the library's texts
repeat: aliases are positional) into closures over `(item, names, values)`. What is covered is
what the library sends (checked against DynamoDB Local by tests/sim/test_sim_differential.py):
comparisons, BETWEEN, IN, AND/OR/NOT, attribute_exists / attribute_not_exists / begins_with /
contains / size; SET with ``+``/``-``, ``if_not_exists`` and ``list_append``; REMOVE; ADD and
DELETE of numbers and sets. Every operand is read from the item as it was before the update, as
DynamoDB does. A malformed or inapplicable expression raises `Invalid` (a ValidationException).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

Wire = dict[str, Any]
Item = dict[str, Wire]
Names = dict[str, str]
Values = dict[str, Wire]
Path = tuple[str | int, ...]


class Invalid(Exception):
    """A ValidationException: the expression cannot be parsed or applied to this item."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+)|(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<op><>|<=|>=|[=<>(),.\[\]+-]))"
)
_KEYWORDS = {"AND", "OR", "NOT", "BETWEEN", "IN", "SET", "REMOVE", "ADD", "DELETE"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise Invalid(f"cannot parse expression at {text[pos : pos + 20]!r}")
        kind = match.lastgroup
        assert kind is not None
        token = match.group(kind)
        if kind == "word" and token.upper() in _KEYWORDS:
            kind, token = "kw", token.upper()
        out.append((kind, token))
        pos = match.end()
    return out


def number(text: str) -> int | Decimal:
    try:
        return int(text)
    except ValueError:
        return Decimal(text)


def number_text(value: int | Decimal) -> str:
    if isinstance(value, int):
        return str(value)
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def get(item: Item, path: Path) -> Wire | None:
    node: Any = item.get(path[0])  # type: ignore[arg-type]
    for part in path[1:]:
        if node is None:
            return None
        if isinstance(part, int):
            items = node.get("L")
            node = items[part] if items is not None and part < len(items) else None
        else:
            members = node.get("M")
            node = None if members is None else members.get(part)
    found: Wire | None = node
    return found


def _equal(a: Wire, b: Wire) -> bool:
    ((ka, va),) = a.items()
    ((kb, vb),) = b.items()
    if ka != kb:
        return False
    if ka == "N":
        return bool(number(va) == number(vb))
    if ka in ("SS", "BS"):
        return set(va) == set(vb)
    if ka == "NS":
        return {number(v) for v in va} == {number(v) for v in vb}
    if ka == "M":
        return va.keys() == vb.keys() and all(_equal(va[k], vb[k]) for k in va)
    if ka == "L":
        return len(va) == len(vb) and all(_equal(x, y) for x, y in zip(va, vb, strict=True))
    return bool(va == vb)


def _order(a: Wire, b: Wire) -> int | None:
    """-1, 0, 1 for two scalars of one comparable type; None when they do not compare."""
    ((ka, va),) = a.items()
    ((kb, vb),) = b.items()
    if ka != kb or ka not in ("N", "S", "B"):
        return None
    x, y = (number(va), number(vb)) if ka == "N" else (va, vb)
    return (x > y) - (x < y)


_COMPARE: dict[str, Callable[[int], bool]] = {
    "<": lambda o: o < 0,
    "<=": lambda o: o <= 0,
    ">": lambda o: o > 0,
    ">=": lambda o: o >= 0,
}

Condition = Callable[[Item, Values], bool]
Update = Callable[[Item, Item, Values], None]


class _Parser:
    """Compiles one expression, with its attribute names resolved, to the source of a Python
    expression (conditions, operands) or statements (update actions) over the item `i` (for an
    update: the old item; actions change `new`) and the values `v`; `compile` turns it into a
    function. A tenth of the cost of evaluating a tree of closures per request."""

    def __init__(self, text: str, names: Names) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.names = names

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, token: str | None = None) -> tuple[str, str]:
        current = self.peek()
        if current is None or (token is not None and current[1] != token):
            raise Invalid(f"expected {token or 'more'}, found {current}")
        self.pos += 1
        return current

    def at(self, token: str) -> bool:
        current = self.peek()
        return current is not None and current[1] == token and current[0] in ("op", "kw")

    def done(self) -> None:
        if self.peek() is not None:
            raise Invalid(f"unexpected {self.peek()}")

    # --- paths and operands ----------------------------------------------------------------

    def path(self) -> Path:
        parts: list[str | int] = []
        kind, token = self.take()
        if kind not in ("name", "word"):
            raise Invalid(f"expected an attribute, found {(kind, token)}")
        parts.append(self._name(kind, token))
        while self.at(".") or self.at("["):
            if self.take()[1] == ".":
                parts.append(self._name(*self.take()))
            else:
                parts.append(int(self.take()[1]))
                self.take("]")
        return tuple(parts)

    def _name(self, kind: str, token: str) -> str:
        if kind != "name":
            return token
        if token not in self.names:
            raise Invalid(f"An expression attribute name used is not defined: {token}")
        return self.names[token]

    def operand(self) -> str:
        current = self.peek()
        if current is None:
            raise Invalid("expected an operand")
        kind, token = current
        if kind == "value":
            self.take()
            return f"v[{token!r}]"
        if kind == "word" and token == "size":
            self.take()
            self.take("(")
            inner = self.operand()
            self.take(")")
            return f"_size({inner})"
        return _read("i", self.path())

    # --- conditions --------------------------------------------------------------------------

    def condition(self) -> str:
        parts = [self.conjunction()]
        while self.at("OR"):
            self.take()
            parts.append(self.conjunction())
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def conjunction(self) -> str:
        parts = [self.negation()]
        while self.at("AND"):
            self.take()
            parts.append(self.negation())
        return parts[0] if len(parts) == 1 else "(" + " and ".join(parts) + ")"

    def negation(self) -> str:
        if self.at("NOT"):
            self.take()
            return f"(not {self.negation()})"
        return self.predicate()

    def predicate(self) -> str:
        if self.at("("):
            self.take()
            inner = self.condition()
            self.take(")")
            return inner
        current = self.peek()
        if current is not None and current[0] == "word" and current[1] in _FUNCTIONS:
            following = self.tokens[self.pos + 1] if self.pos + 1 < len(self.tokens) else None
            if following == ("op", "("):
                return self.function()
        left = self.operand()
        current = self.peek()
        if current is None:
            raise Invalid("expected a comparison")
        token = current[1]
        if token == "BETWEEN":
            self.take()
            low = self.operand()
            self.take("AND")
            return f"_between({left}, {low}, {self.operand()})"
        if token == "IN":
            self.take()
            self.take("(")
            options = [self.operand()]
            while self.at(","):
                self.take()
                options.append(self.operand())
            self.take(")")
            return f"_among({left}, ({', '.join(options)},))"
        self.take()
        right = self.operand()
        if token == "=":
            return f"_eq({left}, {right})"
        if token == "<>":
            return f"_ne({left}, {right})"
        if token not in _COMPARE:
            raise Invalid(f"unknown comparator {token}")
        return f"_compare({left}, {right}, {token!r})"

    def function(self) -> str:
        name = self.take()[1]
        self.take("(")
        target = _read("i", self.path())
        argument = None
        if self.at(","):
            self.take()
            argument = self.operand()
        self.take(")")
        if name == "attribute_exists":
            return f"({target} is not None)"
        if name == "attribute_not_exists":
            return f"({target} is None)"
        if argument is None:
            raise Invalid(f"{name} takes two arguments")
        if name == "begins_with":
            return f"_begins({target}, {argument})"
        if name == "contains":
            return f"_contains({target}, {argument})"
        if name == "attribute_type":
            return f"_typed({target}, {argument})"
        raise Invalid(f"unknown function {name}")

    # --- updates -----------------------------------------------------------------------------

    def update(self) -> list[str]:
        """Statements, each changing `new` with operands read from the old item `i`."""
        actions: list[str] = []
        while self.peek() is not None:
            clause = self.take()[1]
            if clause not in ("SET", "REMOVE", "ADD", "DELETE"):
                raise Invalid(f"expected SET, REMOVE, ADD or DELETE, found {clause}")
            while True:
                actions.append(self.action(clause))
                if not self.at(","):
                    break
                self.take()
        return actions

    def action(self, clause: str) -> str:
        path = self.path()
        if clause == "REMOVE":
            return f"_remove(new, {path!r})"
        if clause in ("ADD", "DELETE"):
            return f"_add(new, {path!r}, {self.operand()}, {clause == 'ADD'})"
        self.take("=")
        return f"_set(new, {path!r}, {self.value()})"

    def value(self) -> str:
        left = self.term()
        if self.at("+") or self.at("-"):
            sign = 1 if self.take()[1] == "+" else -1
            return f"_arithmetic({left}, {self.term()}, {sign})"
        return left

    def term(self) -> str:
        current = self.peek()
        if current is not None and current[0] == "word" and current[1] in _UPDATE_FUNCTIONS:
            name = self.take()[1]
            self.take("(")
            first = self.operand()
            self.take(",")
            second = self.operand()
            self.take(")")
            if name == "if_not_exists":
                return f"_fallback({first}, {second})"
            return f"_append({first}, {second})"
        return f"_present({self.operand()})"


_FUNCTIONS = {"attribute_exists", "attribute_not_exists", "begins_with", "contains",
              "attribute_type"}  # fmt: skip
_UPDATE_FUNCTIONS = {"if_not_exists", "list_append"}


def _read(item: str, path: Path) -> str:
    """Source reading `path` of `item` (None when absent)."""
    if len(path) == 1:
        return f"{item}.get({path[0]!r})"
    return f"get({item}, {path!r})"


def _eq(a: Wire | None, b: Wire | None) -> bool:
    return a is not None and b is not None and _equal(a, b)


def _ne(a: Wire | None, b: Wire | None) -> bool:
    return a is not None and b is not None and not _equal(a, b)


def _compare(a: Wire | None, b: Wire | None, comparator: str) -> bool:
    if a is None or b is None:
        return False
    order = _order(a, b)
    return order is not None and _COMPARE[comparator](order)


def _between(x: Wire | None, low: Wire | None, high: Wire | None) -> bool:
    if x is None or low is None or high is None:
        return False
    a, b = _order(x, low), _order(x, high)
    return a is not None and b is not None and a >= 0 and b <= 0


def _among(x: Wire | None, options: tuple[Wire | None, ...]) -> bool:
    return x is not None and any(o is not None and _equal(x, o) for o in options)


def _size(found: Wire | None) -> Wire | None:
    if found is None:
        return None
    ((k, v),) = found.items()
    return {"N": str(len(v.encode() if k == "S" else v))}


def _begins(x: Wire | None, prefix: Wire | None) -> bool:
    if x is None or prefix is None or "S" not in x or "S" not in prefix:
        return False
    return bool(x["S"].startswith(prefix["S"]))


def _contains(x: Wire | None, part: Wire | None) -> bool:
    if x is None or part is None:
        return False
    ((k, value),) = x.items()
    ((_, wanted),) = part.items()
    if k == "S":
        return bool(wanted in value)
    if k in ("SS", "NS", "BS"):
        return bool(wanted in value)
    if k == "L":
        return any(_equal(e, part) for e in value)
    return False


def _typed(x: Wire | None, kind: Wire | None) -> bool:
    return x is not None and next(iter(x)) == (kind or {"S": ""}).get("S")


def _arithmetic(a: Wire, b: Wire, sign: int) -> Wire:
    if "N" not in a or "N" not in b:
        raise Invalid("An operand in the update expression has an incorrect data type")
    return {"N": number_text(number(a["N"]) + sign * number(b["N"]))}


def _fallback(found: Wire | None, otherwise: Wire | None) -> Wire:
    return found if found is not None else _present(otherwise)


def _append(a: Wire | None, b: Wire | None) -> Wire:
    first, second = _present(a), _present(b)
    if "L" not in first or "L" not in second:
        raise Invalid("list_append needs two lists")
    return {"L": [*first["L"], *second["L"]]}


def _present(value: Wire | None) -> Wire:
    if value is None:
        raise Invalid(
            "The provided expression refers to an attribute that does not exist in the item"
        )
    return value


def _parent(item: Item, path: Path) -> tuple[Any, str | int]:
    """The container holding `path`'s last element (the item's attributes, a map's members or a
    list's elements), and that element. Every map and list on the way is copied into its parent
    first: the new item shares them with the old one (copy on write: `SimTable._updated`)."""
    container: Any = item
    for index, part in enumerate(path[:-1]):
        if isinstance(container, list):
            node = container[part] if isinstance(part, int) and part < len(container) else None
        else:
            node = container.get(part)
        if node is not None:
            if isinstance(path[index + 1], int):
                members = node.get("L")
                if members is not None:
                    node = list(members)
                    container[part] = {"L": node}
                else:
                    node = None
            else:
                fields = node.get("M")
                if fields is not None:
                    node = dict(fields)
                    container[part] = {"M": node}
                else:
                    node = None
        if node is None:
            raise Invalid(
                "The document path provided in the update expression is invalid for update"
            )
        container = node
    return container, path[-1]


def _set(item: Item, path: Path, value: Wire) -> None:
    container, last = _parent(item, path)
    if isinstance(container, list):
        assert isinstance(last, int)
        if last < len(container):
            container[last] = value
        else:
            container.append(value)
    else:
        container[last] = value


def _remove(item: Item, path: Path) -> None:
    container, last = _parent(item, path)
    if isinstance(container, list):
        if isinstance(last, int) and last < len(container):
            del container[last]
    else:
        container.pop(last, None)


def _add(item: Item, path: Path, value: Wire | None, adding: bool) -> None:
    value = _present(value)
    container, last = _parent(item, path)
    current = container.get(last) if isinstance(container, dict) else None
    ((kind, amount),) = value.items()
    if kind == "N":
        if not adding:
            raise Invalid("DELETE takes a set")
        base = number(current["N"]) if current is not None else 0
        container[last] = {"N": number_text(base + number(amount))}
        return
    if kind not in ("SS", "NS", "BS"):
        raise Invalid("ADD and DELETE take a number or a set")
    members = list(current[kind]) if current is not None else []
    if adding:
        members += [m for m in amount if m not in members]
    else:
        members = [m for m in members if m not in amount]
    if members:
        container[last] = {kind: members}
    else:
        container.pop(last, None)


_compiled: dict[tuple[str, str, tuple[tuple[str, str], ...]], Any] = {}


def _compile(kind: str, text: str, names: Names) -> Any:
    """The function of one expression with these attribute names, made once."""
    key = (kind, text, tuple(sorted(names.items())))
    found = _compiled.get(key)
    if found is not None:
        return found
    parser = _Parser(text, names)
    if kind == "condition":
        body = f"return {parser.condition()}"
        parser.done()
        head = "def compiled(i, v):"
    else:
        body = "\n    ".join(parser.update()) or "pass"
        head = "def compiled(i, new, v):"
    source = (f"{head}\n  try:\n    {body}\n  except KeyError as missing:\n"
              "    raise Invalid('An expression attribute value used is not defined: '"
              " + str(missing.args[0])) from None\n")  # fmt: skip
    namespace: dict[str, Any] = dict(globals())
    exec(compile(source, f"<expression {text[:40]}>", "exec"), namespace)
    found = _compiled[key] = namespace["compiled"]
    return found


def condition(text: str, names: Names) -> Condition:
    """The compiled condition (or key condition) expression `text`: `(item, values) -> bool`."""
    compiled: Condition = _compile("condition", text, names)
    return compiled


def update(text: str, names: Names) -> Update:
    """The compiled update expression `text`: `(old, new, values)` changes `new`."""
    compiled: Update = _compile("update", text, names)
    return compiled
