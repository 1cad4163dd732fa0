"""AWS CDK infrastructure for zae-limiter: the `ZaeLimiter` construct and `ZaeLimiterStack`."""

from .construct import ZaeLimiter
from .props import ZaeLimiterProps
from .stack import ZaeLimiterStack

__all__ = ["ZaeLimiter", "ZaeLimiterProps", "ZaeLimiterStack"]
