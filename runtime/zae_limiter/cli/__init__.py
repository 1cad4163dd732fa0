"""The `zae-limiter` command line (entry point `zae_limiter.cli:cli`)."""

from .main import cli

__all__ = ["cli"]
