"""Serve an ASGI app with uvicorn on 127.0.0.1 (a free port) inside the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import uvicorn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextlib.asynccontextmanager
async def serving(app: Any, *, lifespan: Literal["on", "off"] = "off") -> AsyncIterator[str]:
    """Run `app` until the block exits (`lifespan="on"`: through its startup and shutdown, as
    `uvicorn module:app` does); yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan=lifespan, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises the startup error
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py (the examples folder is not a package)."""
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
