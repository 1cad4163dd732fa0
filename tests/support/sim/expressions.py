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

Operand = Callable[[Item, Names, Values], Wire | None]
Condition = Callable[[Item, Names, Values], bool]


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

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

    def path(self) -> Callable[[Names], Path]:
        parts: list[tuple[str, str]] = [self.take()]
        if parts[0][0] not in ("name", "word"):
            raise Invalid(f"expected an attribute, found {parts[0]}")
        while self.at(".") or self.at("["):
            if self.take()[1] == ".":
                parts.append(self.take())
            else:
                parts.append(("index", self.take()[1]))
                self.take("]")
        fixed = all(kind != "name" for kind, _ in parts)

        def resolve(names: Names) -> Path:
            out: list[str | int] = []
            for kind, token in parts:
                if kind == "index":
                    out.append(int(token))
                elif kind == "name":
                    if token not in names:
                        raise Invalid(f"An expression attribute name used is not defined: {token}")
                    out.append(names[token])
                else:
                    out.append(token)
            return tuple(out)

        if fixed:
            constant = resolve({})
            return lambda names: constant
        return resolve

    def operand(self) -> Operand:
        current = self.peek()
        if current is None:
            raise Invalid("expected an operand")
        kind, token = current
        if kind == "value":
            self.take()

            def value(item: Item, names: Names, values: Values) -> Wire | None:
                if token not in values:
                    raise Invalid(f"An expression attribute value used is not defined: {token}")
                return values[token]

            return value
        if kind == "word" and token == "size":
            self.take()
            self.take("(")
            inner = self.operand()
            self.take(")")

            def size(item: Item, names: Names, values: Values) -> Wire | None:
                found = inner(item, names, values)
                if found is None:
                    return None
                ((k, v),) = found.items()
                return {"N": str(len(v.encode() if k == "S" else v))}

            return size
        resolve = self.path()
        return lambda item, names, values: get(item, resolve(names))

    # --- conditions --------------------------------------------------------------------------

    def condition(self) -> Condition:
        left = self.conjunction()
        while self.at("OR"):
            self.take()
            right = self.conjunction()
            left = (lambda a, b: lambda i, n, v: a(i, n, v) or b(i, n, v))(left, right)
        return left

    def conjunction(self) -> Condition:
        left = self.negation()
        while self.at("AND"):
            self.take()
            right = self.negation()
            left = (lambda a, b: lambda i, n, v: a(i, n, v) and b(i, n, v))(left, right)
        return left

    def negation(self) -> Condition:
        if self.at("NOT"):
            self.take()
            inner = self.negation()
            return lambda i, n, v: not inner(i, n, v)
        return self.predicate()

    def predicate(self) -> Condition:
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
            return self.between(left)
        if token == "IN":
            return self.among(left)
        self.take()
        right = self.operand()
        if token == "=":
            return lambda i, n, v: _both(left(i, n, v), right(i, n, v), _equal)
        if token == "<>":
            return lambda i, n, v: _both(
                left(i, n, v), right(i, n, v), lambda a, b: not _equal(a, b)
            )
        test = _COMPARE.get(token)
        if test is None:
            raise Invalid(f"unknown comparator {token}")

        def compare(i: Item, n: Names, v: Values) -> bool:
            a, b = left(i, n, v), right(i, n, v)
            if a is None or b is None:
                return False
            order = _order(a, b)
            return order is not None and test(order)

        return compare

    def between(self, left: Operand) -> Condition:
        self.take()
        low = self.operand()
        self.take("AND")
        high = self.operand()

        def test(i: Item, n: Names, v: Values) -> bool:
            x, lo, hi = left(i, n, v), low(i, n, v), high(i, n, v)
            if x is None or lo is None or hi is None:
                return False
            a, b = _order(x, lo), _order(x, hi)
            return a is not None and b is not None and a >= 0 and b <= 0

        return test

    def among(self, left: Operand) -> Condition:
        self.take()
        self.take("(")
        options = [self.operand()]
        while self.at(","):
            self.take()
            options.append(self.operand())
        self.take(")")

        def test(i: Item, n: Names, v: Values) -> bool:
            x = left(i, n, v)
            return x is not None and any(
                (o := option(i, n, v)) is not None and _equal(x, o) for option in options
            )

        return test

    def function(self) -> Condition:
        name = self.take()[1]
        self.take("(")
        resolve = self.path()
        argument: Operand | None = None
        if self.at(","):
            self.take()
            argument = self.operand()
        self.take(")")
        if name == "attribute_exists":
            return lambda i, n, v: get(i, resolve(n)) is not None
        if name == "attribute_not_exists":
            return lambda i, n, v: get(i, resolve(n)) is None
        assert argument is not None
        other = argument
        if name == "begins_with":

            def begins(i: Item, n: Names, v: Values) -> bool:
                x, prefix = get(i, resolve(n)), other(i, n, v)
                if x is None or prefix is None or "S" not in x or "S" not in prefix:
                    return False
                return bool(x["S"].startswith(prefix["S"]))

            return begins
        if name == "contains":

            def contains(i: Item, n: Names, v: Values) -> bool:
                x, part = get(i, resolve(n)), other(i, n, v)
                if x is None or part is None:
                    return False
                ((k, value),) = x.items()
                ((_, wanted),) = part.items()
                if k == "S":
                    return bool(wanted in value)
                if k in ("SS", "NS", "BS"):
                    return wanted in value
                if k == "L":
                    return any(_equal(e, part) for e in value)
                return False

            return contains
        if name == "attribute_type":
            return lambda i, n, v: (
                (x := get(i, resolve(n))) is not None
                and next(iter(x)) == (other(i, n, v) or {"S": ""}).get("S")
            )
        raise Invalid(f"unknown function {name}")

    # --- updates -----------------------------------------------------------------------------

    def update(self) -> list[Callable[[Item, Item, Names, Values], None]]:
        """Actions, each applied to the new item with operands read from the old one."""
        actions: list[Callable[[Item, Item, Names, Values], None]] = []
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

    def action(self, clause: str) -> Callable[[Item, Item, Names, Values], None]:
        resolve = self.path()
        if clause == "REMOVE":
            return lambda old, new, n, v: _remove(new, resolve(n))
        if clause in ("ADD", "DELETE"):
            operand = self.operand()
            adding = clause == "ADD"
            return lambda old, new, n, v: _add(new, resolve(n), operand(old, n, v), adding)
        self.take("=")
        value = self.value()
        return lambda old, new, n, v: _set(new, resolve(n), value(old, n, v))

    def value(self) -> Callable[[Item, Names, Values], Wire]:
        left = self.term()
        if self.at("+") or self.at("-"):
            sign = 1 if self.take()[1] == "+" else -1
            right = self.term()

            def arithmetic(i: Item, n: Names, v: Values) -> Wire:
                a, b = left(i, n, v), right(i, n, v)
                if "N" not in a or "N" not in b:
                    raise Invalid("An operand in the update expression has an incorrect data type")
                return {"N": number_text(number(a["N"]) + sign * number(b["N"]))}

            return arithmetic
        return left

    def term(self) -> Callable[[Item, Names, Values], Wire]:
        current = self.peek()
        if (
            current is not None
            and current[0] == "word"
            and current[1]
            in (
                "if_not_exists",
                "list_append",
            )
        ):
            name = self.take()[1]
            self.take("(")
            first = self.operand()
            self.take(",")
            second = self.operand()
            self.take(")")
            if name == "if_not_exists":

                def fallback(i: Item, n: Names, v: Values) -> Wire:
                    found = first(i, n, v)
                    return found if found is not None else _present(second(i, n, v))

                return fallback

            def append(i: Item, n: Names, v: Values) -> Wire:
                a, b = _present(first(i, n, v)), _present(second(i, n, v))
                if "L" not in a or "L" not in b:
                    raise Invalid("list_append needs two lists")
                return {"L": [*a["L"], *b["L"]]}

            return append
        operand = self.operand()
        return lambda i, n, v: _present(operand(i, n, v))


_FUNCTIONS = {"attribute_exists", "attribute_not_exists", "begins_with", "contains",
              "attribute_type"}  # fmt: skip


def _both(a: Wire | None, b: Wire | None, test: Callable[[Wire, Wire], bool]) -> bool:
    return a is not None and b is not None and test(a, b)


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


_conditions: dict[str, Condition] = {}
_updates: dict[str, list[Callable[[Item, Item, Names, Values], None]]] = {}


def condition(text: str) -> Condition:
    """The compiled condition (or key condition) expression `text`."""
    compiled = _conditions.get(text)
    if compiled is None:
        parser = _Parser(text)
        compiled = parser.condition()
        parser.done()
        _conditions[text] = compiled
    return compiled


def update(text: str) -> list[Callable[[Item, Item, Names, Values], None]]:
    """The compiled update expression `text`: actions `(old, new, names, values)`."""
    compiled = _updates.get(text)
    if compiled is None:
        compiled = _updates[text] = _Parser(text).update()
    return compiled
