"""Helpers for the command-line tests: `ZL` runs `zae-limiter` through click's CliRunner
against one table and checks the exit code."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from click.testing import CliRunner, Result

from support.tables import TableRef
from zae_limiter.cli import cli


@dataclass
class ZL:
    """`zae-limiter --table T --endpoint-url URL ARGS...`, checking the exit code."""

    table: TableRef
    runner: CliRunner

    def __call__(
        self,
        *args: str,
        code: int = 0,
        input: str | None = None,
        env: dict[str, str | None] | None = None,
        connect: bool = True,
    ) -> Result:
        prefix = (
            [
                "--table",
                self.table.name,
                "--endpoint-url",
                self.table.endpoint_url,
                "--region",
                self.table.region,
            ]
            if connect
            else []
        )
        result = self.runner.invoke(cli, [*prefix, *args], input=input, env=env)
        assert result.exit_code == code, (
            f"zae-limiter {' '.join(args)} exited {result.exit_code}, expected {code}\n"
            f"--- stdout:\n{result.stdout}\n--- stderr:\n{result.stderr}\n"
            f"--- exception: {result.exception!r}"
        )
        return result

    def json(self, *args: str, code: int = 0, input: str | None = None) -> Any:
        """The same, with `-o json` after the command; the parsed stdout."""
        return json.loads(self(*args, "-o", "json", code=code, input=input).stdout)

    def error(self, *args: str, code: int = 1, connect: bool = True) -> str:
        """Run a command that must fail; its stderr (one line, no traceback)."""
        result = self(*args, code=code, connect=connect)
        assert "Traceback" not in result.stderr
        return result.stderr


def limit_args(*specs: str) -> Sequence[str]:
    return [arg for spec in specs for arg in ("-l", spec)]
