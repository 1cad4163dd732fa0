"""AWS CDK constructs of zae-limiter (`pip install 'zae-limiter[cdk]'`): see docs/deploying.md.

`ZaeLimiter` is the construct to add to your own stack; `ZaeLimiterStack` is a stack holding one.
The Lambdas are bundled from this installed package, without Docker or network.
"""

try:
    import aws_cdk  # noqa: F401
except ModuleNotFoundError as error:  # pragma: no cover - depends on the installed extras
    raise ModuleNotFoundError(
        "zae_limiter.cdk needs the AWS CDK: pip install 'zae-limiter[cdk]'", name=error.name
    ) from error

from .construct import ZaeLimiter
from .props import ZaeLimiterProps
from .stack import ZaeLimiterStack

__all__ = ["ZaeLimiter", "ZaeLimiterProps", "ZaeLimiterStack"]
