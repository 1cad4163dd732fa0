"""`local`: DynamoDB Local for development (docs/cli.md). Thin shells over
`zae_limiter.local` (engine, state) and `zae_limiter.local.stream_runner` (the aggregator)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from .. import local as engine
from ..local.processes import is_our_process, stop_pid
from .app import Settings
from .output import emit, fields, note

AGGREGATOR_ROLE = "aggregator"
AGGREGATOR_STATUS = "aggregator.json"
AGGREGATOR_LOG = "aggregator.log"
#: Where the background aggregator keeps its place in the stream, so a restart resumes there.
AGGREGATOR_CHECKPOINT = "aggregator-checkpoint.json"
#: The `--alerts-log` path `local up` was given, so that `local restart` keeps appending there.
AGGREGATOR_ALERTS_LOG = "aggregator-alerts-log"
#: Stream records the aggregator passed over after they kept failing, one JSON line each with
#: its reason (docs/usage.md): what the Lambda's DLQ is on AWS.
AGGREGATOR_DEAD_LETTERS = "aggregator-dead-letters.jsonl"


@click.group()
def local() -> None:
    """DynamoDB Local on 127.0.0.1, with the aggregator polling its stream."""


def _aggregator_process(state: engine.LocalState) -> engine.RecordedProcess | None:
    """The recorded aggregator, if it is still our running process."""
    for p in state.processes:
        if p.role == AGGREGATOR_ROLE and is_our_process(p.pid, (p.marker,)):
            return p
    return None


def _aggregator_running(state: engine.LocalState) -> bool:
    return _aggregator_process(state) is not None


def _start_aggregator(
    table: str,
    status: engine.LocalStatus,
    *,
    restart: bool = False,
    alerts_log: str | None = None,
) -> int | None:
    """Start the background aggregator unless one recorded here already runs (and is not
    stopping); its pid. `restart` stops the running one first (it resumes from the checkpoint).
    `alerts_log` is remembered in the state directory for later restarts.
    """
    from ..local import stream_runner

    recorded = engine.load_state(status.state_dir)
    if recorded is None or status.endpoint_url is None:
        return None
    remembered = status.state_dir / AGGREGATOR_ALERTS_LOG
    if alerts_log is not None:
        remembered.write_text(str(Path(alerts_log).resolve()))
    elif remembered.exists():
        alerts_log = remembered.read_text()
    running = _aggregator_process(recorded)
    if running is not None:
        report = stream_runner.read_status(status.state_dir / AGGREGATOR_STATUS, pid=running.pid)
        if not restart and not (report and report.get("stopping")):
            return None
        stop_pid(running.pid, markers=(running.marker,))
    process = stream_runner.start_aggregator_process(
        table=table,
        endpoint_url=status.endpoint_url,
        region=recorded.region or engine.LOCAL_REGION,
        log_path=status.state_dir / AGGREGATOR_LOG,
        status_path=status.state_dir / AGGREGATOR_STATUS,
        checkpoint_path=status.state_dir / AGGREGATOR_CHECKPOINT,
        alerts_log=alerts_log,
        dead_letter_path=status.state_dir / AGGREGATOR_DEAD_LETTERS,
    )
    engine.add_process(
        AGGREGATOR_ROLE,
        process.pid,
        process.marker,
        log=str(process.log_path) if process.log_path else None,
        state=status.state_dir,
    )
    return process.pid


def _status_dict(status: engine.LocalStatus) -> dict[str, Any]:
    data = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(status).items()}
    data["aggregator"] = _aggregator_status(status) if status.running else None
    return data


def _aggregator_status(status: engine.LocalStatus) -> dict[str, Any] | None:
    """None when no aggregator runs; else what it last reported (`lag_ms`), if anything."""
    from ..local import stream_runner

    recorded = engine.load_state(status.state_dir)
    process = _aggregator_process(recorded) if recorded is not None else None
    if process is None:
        return None
    # only this process's own report: a stopped predecessor's "lag 0" says nothing about it
    report = stream_runner.read_status(status.state_dir / AGGREGATOR_STATUS, pid=process.pid)
    return {"running": True, "pid": process.pid, **(report or {})}


def _loopback_port(endpoint_url: str | None) -> int | None:
    parts = urlsplit(endpoint_url or "")
    return parts.port if parts.hostname in ("127.0.0.1", "localhost", "::1") else None


def local_aggregator(endpoint_url: str | None, table: str) -> dict[str, Any] | None:
    """The aggregator `local up` runs on `table` of the local engine at `endpoint_url`, if any:
    a process recorded in the state directory, which the version record (made for a Lambda)
    does not name."""
    from ..local import stream_runner
    from ..local.state import recorded_dirs

    port = _loopback_port(endpoint_url)
    if port is None:
        return None
    for folder in recorded_dirs():
        recorded = engine.load_state(folder)
        if recorded is None or _loopback_port(recorded.endpoint_url) != port:
            continue
        process = _aggregator_process(recorded)
        report = (
            stream_runner.read_status(folder / AGGREGATOR_STATUS, pid=process.pid)
            if process is not None
            else None
        ) or {}
        if process is not None and report.get("table", recorded.table) == table:
            return {
                "pid": process.pid,
                "version": report.get("version"),
                "lag_ms": report.get("lag_ms"),
                "state_dir": str(folder),
            }
    return None


@local.command("up")
@click.option("--port", type=int, default=engine.DEFAULT_PORT, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), help="Keep the data in PATH.")
@click.option("--in-memory", is_flag=True, help="Keep the data in memory (the default).")
@click.option(
    "--aggregator/--no-aggregator",
    default=True,
    show_default=True,
    help="Run the aggregator on the table's stream (usage snapshots).",
)
@click.option(
    "--alerts-log",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Also append each threshold alert to FILE as a JSON line (docs/alerts.md).",
)
@click.option("--jar", type=click.Path(dir_okay=False), help="DynamoDBLocal.jar to use.")
@click.option(
    "--engine",
    "engine_name",
    type=click.Choice(list(engine.ENGINES)),
    default="dynamodb-local",
    show_default=True,
    help="moto needs no Java (request-shape tests only).",
)
@click.pass_obj
def local_up(
    settings: Settings,
    port: int,
    data_dir: str | None,
    in_memory: bool,
    aggregator: bool,
    alerts_log: str | None,
    jar: str | None,
    engine_name: engine.EngineName,
) -> None:
    """Start DynamoDB Local in the background, create the table, print the `export` lines.
    Idempotent: on a running engine it only ensures the table.

    An in-memory engine that stopped starts empty: the table is created again, with a new
    identity, and processes that had the old one open fail with TableRecreatedError (instead of
    admitting against limits that are gone) until they open it again. The aggregator passes a
    stream record that keeps failing into aggregator-dead-letters.jsonl in the state directory,
    with its reason."""
    if data_dir and in_memory:
        raise click.UsageError("give --data-dir PATH or --in-memory, not both")
    running = engine.status(port=port)
    if running.running:  # `up` only ensures the table (or refuses other settings)
        note(f"{running.engine} already running on {running.endpoint_url}")
    else:
        note(f"starting {engine_name} on 127.0.0.1:{port}...")
    status = engine.up(
        port=port, engine=engine_name, data_dir=data_dir, jar=jar, table=settings.table
    )
    table = status.table or settings.table or "zae-limiter"
    if alerts_log is not None and not aggregator:
        raise click.UsageError("--alerts-log needs the aggregator (leave out --no-aggregator)")
    pid = _start_aggregator(table, status, alerts_log=alerts_log) if aggregator else None
    if pid:
        note(f"aggregator started (pid {pid})")
    elif aggregator:
        note("aggregator already running (`zae-limiter local restart` restarts it)")
    final = engine.status(state=status.state_dir)
    data = {
        **_status_dict(final),
        "table": table,
        "created_table": status.created_table,
        "env": engine.env_vars(state=status.state_dir),
    }
    exports = engine.format_env(engine.env_vars(state=status.state_dir), "sh")
    emit(
        settings,
        data,
        "\n".join(
            [
                *(f"# {line}" for line in final.lines()),
                f"# table {table}: {'created' if status.created_table else 'already there'}",
                exports,
            ]
        ),
    )


PORT_OPTION = click.option(
    "--port", type=int, help="The engine's port [default: every engine `local up` started]."
)


@local.command("down")
@PORT_OPTION
@click.pass_obj
def local_down(settings: Settings, port: int | None) -> None:
    """Stop what `local up` started (by recorded process ids only)."""
    stopped = engine.down(port=port)
    emit(
        settings,
        {"stopped": [{"role": p.role, "pid": p.pid} for p in stopped]},
        "\n".join(f"stopped {p.role} (pid {p.pid})" for p in stopped) or "nothing was running",
    )


@local.command("restart")
@click.pass_obj
def local_restart(settings: Settings) -> None:
    """Restart the aggregator (e.g. after upgrading zae-limiter), keeping the engine and its
    data; it resumes from its checkpoint instead of replaying the stream."""
    status = engine.status()
    if not status.running:
        raise click.ClickException("no local engine is running; run `zae-limiter local up`")
    table = status.table or settings.table or "zae-limiter"
    pid = _start_aggregator(table, status, restart=True)
    emit(settings, {"aggregator_pid": pid, "table": table}, f"aggregator restarted (pid {pid})")


@local.command("status")
@PORT_OPTION
@click.pass_obj
def local_status(settings: Settings, port: int | None) -> None:
    """Running or not, port, pids, tables, aggregator lag."""
    status = engine.status(port=port)
    data = _status_dict(status)
    lines = status.lines()
    aggregator = data.get("aggregator")
    if status.running:
        lag = aggregator.get("lag_ms") if aggregator else None
        if aggregator is None:
            text = "not running"
        elif aggregator.get("stopping"):
            text = "stopping"
        elif "lag_ms" not in aggregator:
            text = "starting"
        else:
            text = f"lag {lag} ms" if lag is not None else "behind (records failing)"
        lines.append(fields([("aggregator", text)]))
    emit(settings, data, "\n".join(lines))


@local.command("env")
@click.option(
    "--format", "fmt", type=click.Choice(list(engine.ENV_FORMATS)), default="sh", show_default=True
)
@click.option("--port", type=int, help="The engine's port [default: the running one, or 8000].")
@click.pass_obj
def local_env(settings: Settings, fmt: engine.EnvFormat, port: int | None) -> None:
    """Print ZAEL_ENDPOINT_URL, dummy credentials and a region for the local engine."""
    values = engine.env_vars(port=port)
    if settings.table and "ZAEL_TABLE" not in values and settings.table != "zae-limiter":
        values["ZAEL_TABLE"] = settings.table
    emit(settings, values, engine.format_env(values, fmt))
