"""The state directories of `zae-limiter local`: which processes `local up` started.

One directory per user and port, so every `local` command agrees whatever directory it runs in:
`<root>/<port>/`, where the root is `$ZAEL_LOCAL_STATE`, else `$XDG_STATE_HOME/zae-limiter/local`,
else `~/.local/state/zae-limiter/local`. `state.json` records the engine, its endpoint and every
process `up` started (the engine, and later the aggregator), each with a marker from its command
line so that `down` never signals a process that merely reused a pid.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_ENV = "ZAEL_LOCAL_STATE"
STATE_FILE = "state.json"
STATE_VERSION = 1
#: The port `state_dir` uses when none is given (the engine's default port).
DEFAULT_PORT = 8000


def state_root() -> Path:
    """The user's root of per-port state directories."""
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV]).expanduser().resolve()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return (Path(base) / "zae-limiter" / "local").resolve()


def state_dir(path: str | os.PathLike[str] | None = None, *, port: int | None = None) -> Path:
    """The state directory: `path` if given, else the user's directory for `port`."""
    if path is not None:
        return Path(path).expanduser().resolve()
    return state_root() / str(port or DEFAULT_PORT)


def recorded_dirs() -> list[Path]:
    """Every per-port state directory of this user that holds a record, by port."""
    root = state_root()
    try:
        found = [d for d in root.iterdir() if d.name.isdigit() and (d / STATE_FILE).is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda d: int(d.name))


@dataclass
class RecordedProcess:
    """One process started by `local up`."""

    role: str  # "engine", "aggregator", ...
    pid: int
    marker: str  # a substring of its command line
    log: str | None = None


@dataclass
class LocalState:
    """What `local up` recorded."""

    engine: str
    host: str
    port: int
    endpoint_url: str
    data_dir: str | None = None
    table: str | None = None
    region: str | None = None
    started_at: float = 0.0
    processes: list[RecordedProcess] = field(default_factory=list)
    version: int = STATE_VERSION

    def pids(self) -> list[int]:
        return [process.pid for process in self.processes]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LocalState:
        processes = [RecordedProcess(**p) for p in data.get("processes", [])]
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["processes"] = processes
        return cls(**fields)


def load_state(directory: str | os.PathLike[str] | None = None) -> LocalState | None:
    """The recorded state, or None when nothing is recorded (or the file is unreadable)."""
    path = state_dir(directory) / STATE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    try:
        return LocalState.from_dict(data)
    except TypeError:
        return None


def save_state(state: LocalState, directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the state atomically; returns the file's path."""
    folder = state_dir(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.to_json() + "\n")
    tmp.replace(path)
    return path


def clear_state(directory: str | os.PathLike[str] | None = None) -> None:
    """Forget the recorded state (logs and data directories stay)."""
    with contextlib.suppress(FileNotFoundError):
        (state_dir(directory) / STATE_FILE).unlink()
