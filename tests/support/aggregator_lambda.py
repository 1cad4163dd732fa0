"""The aggregator Lambda handler (`zae_limiter.lambdas.aggregator.handler`) run as Lambda runs it:
synchronously in a worker thread, with its own event loop, given an event and a context."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any


@dataclass
class FakeContext:
    """What Powertools reads of Lambda's context object."""

    function_name: str = "zae-limiter-aggregator"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:aggregator"
    aws_request_id: str = "request-1"


def loaded_handler() -> Iterator[ModuleType]:
    """The handler module with an event loop and aggregator of its own while the generator runs
    (a fixture's body: the module is shared by every test module that imports it); both closed,
    and what was there before put back, at the end."""
    from zae_limiter.lambdas.aggregator import handler as module

    saved = module._loop, module._aggregator
    module._loop, module._aggregator = asyncio.new_event_loop(), None
    try:
        yield module
    finally:
        if module._aggregator is not None:
            module._loop.run_until_complete(module._aggregator.close())
        module._loop.close()
        module._loop, module._aggregator = saved


async def invoke(handler: ModuleType, event: dict[str, Any]) -> Any:
    """One invocation of the handler with `event`."""
    return await asyncio.to_thread(handler.handler, event, FakeContext())
