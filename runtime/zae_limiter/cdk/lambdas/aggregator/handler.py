"""Lambda entry point (`handler.handler`) of the zae-limiter usage aggregator."""

from zae_limiter.aggregator_lambda import handler

__all__ = ["handler"]
