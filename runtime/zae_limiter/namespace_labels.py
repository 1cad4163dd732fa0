"""How messages name a namespace: by its name, with its id (logs, alerts, errors).

Items carry a namespace's id; people know it by its name. The ids this process resolved (opening
a namespace, the aggregator reading the registry) are remembered here with their names. Ids are
random, so an id never stands for another name. Only messages read this: nothing decides by it.
"""

from __future__ import annotations

_NAMES: dict[str, str] = {}


def seen(namespace_id: str, name: str) -> None:
    """Remember which name `namespace_id` stands for."""
    _NAMES[namespace_id] = name


def name_of(namespace_id: str) -> str | None:
    """The name this process knows `namespace_id` by, if any."""
    return _NAMES.get(namespace_id)


def label(namespace_id: str) -> str:
    """`'name' (id)`, or the id alone if this process never resolved it."""
    name = _NAMES.get(namespace_id)
    return f"{name!r} ({namespace_id})" if name is not None else namespace_id
