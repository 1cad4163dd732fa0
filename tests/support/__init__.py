"""Test support: fixtures (fixtures.py), the wire recorder (wire.py), a fake clock (clock.py),
table helpers (tables.py), fault injection (faults.py) and the docs runner (docs.py)."""
