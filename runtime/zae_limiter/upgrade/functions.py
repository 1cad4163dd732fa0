"""The aggregator function, through the three Lambda actions the `admin` policy grants for it:
`lambda:GetFunction(Configuration)` and `lambda:UpdateFunctionCode` (aiobotocore, like the core).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

from botocore import exceptions as bce

from .errors import UpgradeError

#: After UpdateFunctionCode, poll the function's state this often, at most this many times.
DEFAULT_POLL_INTERVAL_S = 1.0
DEFAULT_MAX_POLLS = 300

_ACCESS = {"AccessDeniedException", "AccessDenied", "UnrecognizedClientException"}


def _client_config() -> Any:
    from aiobotocore.config import AioConfig

    # UpdateFunctionCode with the same bytes twice is harmless, so SDK retries are safe here.
    return AioConfig(
        retries={"mode": "standard", "total_max_attempts": 3}, connect_timeout=5, read_timeout=120
    )


class FunctionCode:
    """Reads and replaces one Lambda function's code."""

    def __init__(self, client: Any, *, poll_interval: float, max_polls: int) -> None:
        self._client = client
        self.poll_interval = poll_interval
        self.max_polls = max_polls
        self.polls = 0

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        *,
        region: str,
        endpoint_url: str | None,
        poll_interval: float = DEFAULT_POLL_INTERVAL_S,
        max_polls: int = DEFAULT_MAX_POLLS,
    ) -> AsyncIterator[FunctionCode]:
        from aiobotocore.session import get_session

        async with get_session().create_client(
            "lambda", region_name=region, endpoint_url=endpoint_url, config=_client_config()
        ) as client:
            yield cls(client, poll_interval=poll_interval, max_polls=max_polls)

    async def describe(self, function: str) -> dict[str, Any]:
        return await self._call(
            "GetFunctionConfiguration",
            function,
            self._client.get_function_configuration(FunctionName=function),
        )

    async def replace_code(self, function: str, zip_bytes: bytes) -> dict[str, Any]:
        """UpdateFunctionCode ($LATEST, which the stream's event source mapping invokes)."""
        return await self._call(
            "UpdateFunctionCode",
            function,
            self._client.update_function_code(
                FunctionName=function, ZipFile=zip_bytes, Publish=False
            ),
        )

    async def wait_until_ready(self, function: str, *, after_update: bool) -> dict[str, Any]:
        """Poll until no update is in progress (and, after an update, it succeeded and the
        function is Active). Raises UpgradeError if the update failed or never finished."""
        for _ in range(self.max_polls):
            details = await self.describe(function)
            self.polls += 1
            state = details.get("State")
            update = details.get("LastUpdateStatus")
            if update == "Failed" or state == "Failed":
                reason = details.get("LastUpdateStatusReason") or details.get("StateReason") or ""
                raise UpgradeError(
                    f"Lambda reports the update of {function} failed: {reason}. Its previous "
                    "code may still be running; fix the cause and run `zae-limiter upgrade` again."
                )
            busy = update == "InProgress" or state == "Pending"
            if not busy and (not after_update or state in (None, "Active")):
                return details
            await asyncio.sleep(self.poll_interval)
        raise UpgradeError(
            f"{function} did not become active after {self.max_polls} checks "
            f"{self.poll_interval:g} s apart; check it in the Lambda console, then run "
            "`zae-limiter upgrade` again"
        )

    @staticmethod
    async def _call(
        operation: str, function: str, request: Awaitable[dict[str, Any]]
    ) -> dict[str, Any]:
        try:
            return await request
        except bce.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _ACCESS:
                raise UpgradeError(
                    f"AWS refused lambda:{operation} on {function}; attach the zae-limiter "
                    "'admin' managed policy (it grants updating the aggregator's code)"
                ) from exc
            if code == "ResourceNotFoundException":
                raise UpgradeError(
                    f"the aggregator function {function} named by the version record does not "
                    "exist; redeploy the stack with `cdk deploy`"
                ) from exc
            raise UpgradeError(f"lambda:{operation} on {function} failed: {exc}") from exc
        except (bce.BotoCoreError, OSError) as exc:
            raise UpgradeError(f"lambda:{operation} on {function} failed: {exc}") from exc
