"""Local DynamoDB engines for development and tests: DynamoDB Local (Java) or moto's server.

`start_engine()` starts one engine process bound to 127.0.0.1 and returns a `RunningEngine`
(`.endpoint_url`, `.stop()`); the test fixtures use it. `up`, `down`, `status` and `env` are the
functions behind `zae-limiter local up|down|status|env`; they record what they start in
a per-user, per-port state directory (`local.state`) and stop processes by recorded pid only.
"""

from zae_limiter.local.commands import (
    ENV_FORMATS,
    EnvFormat,
    LocalStatus,
    add_process,
    create_table,
    down,
    env,
    env_vars,
    format_env,
    status,
    up,
)
from zae_limiter.local.engine import (
    DEFAULT_PORT,
    ENGINES,
    LOCAL_ACCESS_KEY_ID,
    LOCAL_REGION,
    LOCAL_SECRET_ACCESS_KEY,
    EngineName,
    RunningEngine,
    answers,
    free_port,
    list_tables,
    start_engine,
)
from zae_limiter.local.errors import (
    EngineAlreadyRunningError,
    EngineStartError,
    JarNotFoundError,
    JavaNotFoundError,
    LocalEngineError,
    PortInUseError,
)
from zae_limiter.local.java import find_jar, find_java
from zae_limiter.local.state import LocalState, RecordedProcess, load_state, state_dir

__all__ = [
    "DEFAULT_PORT",
    "ENGINES",
    "ENV_FORMATS",
    "LOCAL_ACCESS_KEY_ID",
    "LOCAL_REGION",
    "LOCAL_SECRET_ACCESS_KEY",
    "EngineAlreadyRunningError",
    "EngineName",
    "EngineStartError",
    "EnvFormat",
    "JarNotFoundError",
    "JavaNotFoundError",
    "LocalEngineError",
    "LocalState",
    "LocalStatus",
    "PortInUseError",
    "RecordedProcess",
    "RunningEngine",
    "add_process",
    "answers",
    "create_table",
    "down",
    "env",
    "env_vars",
    "find_jar",
    "find_java",
    "format_env",
    "free_port",
    "list_tables",
    "load_state",
    "start_engine",
    "state_dir",
    "status",
    "up",
]
