"""`ZaeLimiterStack`: a stack holding one `ZaeLimiter` construct."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from .construct import ZaeLimiter
from .context import props_from_context
from .props import ZaeLimiterProps


class ZaeLimiterStack(Stack):
    """One zae-limiter deployment; `stack_kwargs` go to `Stack` (env, synthesizer, ...).

    With `from_context=True`, properties set in the CDK context (`-c name=value`) override
    `props` (see `infra.context`); `app.py` uses this.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: ZaeLimiterProps | None = None,
        from_context: bool = False,
        **stack_kwargs: Any,
    ) -> None:
        stack_kwargs.setdefault(
            "description", "zae-limiter: distributed rate limiter on DynamoDB (docs/deploying.md)"
        )
        super().__init__(scope, construct_id, **stack_kwargs)
        if from_context:
            props = props_from_context(self, props)
        self.limiter = ZaeLimiter(self, "ZaeLimiter", props)
