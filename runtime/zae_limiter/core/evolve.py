"""`evolve`: a changed copy of a frozen value, for the acquire path's hot loop.

`dataclasses.replace` walks the class's fields and runs the frozen `__init__` (one
`object.__setattr__` per field) on every call: about 3-4 µs on this machine, and a warm acquire
makes a dozen such copies. `evolve` copies the instance's attribute dict instead (about 1 µs).
Only for frozen dataclasses without `__slots__`, `__post_init__` or `init=False` fields (the
acquire path's values: targets, plans, images, states, writes); an unknown field name raises
`TypeError`, like `replace`.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def evolve(obj: T, **changes: Any) -> T:
    """A copy of `obj` with `changes` (field name -> new value)."""
    attributes = obj.__dict__
    if not changes.keys() <= attributes.keys():
        unknown = sorted(set(changes) - set(attributes))
        raise TypeError(f"{type(obj).__name__} has no field {unknown[0]!r}")
    new = object.__new__(type(obj))
    values = new.__dict__
    values.update(attributes)
    values.update(changes)
    return new
