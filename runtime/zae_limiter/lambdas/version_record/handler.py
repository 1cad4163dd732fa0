"""CloudFormation custom resource entry point: answers CloudFormation for `record_writer`.

Create/Update write zae-limiter's version record and register `default`; Delete does nothing.
The writer (and with it the bundled `zae_limiter` package) is imported inside the request, so
that even an import error is answered with FAILED and its reason instead of leaving the stack
waiting for an hour.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

log = logging.getLogger(__name__)
log.setLevel(logging.INFO)

#: CloudFormation accepts response bodies up to 4 KiB; keep the reason well inside that.
MAX_REASON_CHARS = 1500


def send_response(
    event: dict[str, Any],
    status: str,
    physical_id: str,
    data: dict[str, str] | None = None,
    reason: str = "",
) -> None:
    """PUT the result to CloudFormation's pre-signed response URL."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:MAX_REASON_CHARS] or status,
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data or {},
        }
    ).encode()
    http_request = urllib.request.Request(
        event["ResponseURL"],
        data=body,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(body))},
    )
    with urllib.request.urlopen(http_request, timeout=30) as response:
        log.info("CloudFormation response sent: HTTP %s", response.status)


def handler(event: dict[str, Any], context: object) -> None:
    """Lambda entry point: always answers CloudFormation, SUCCESS or FAILED with the reason."""
    log.info("%s request for %s", event.get("RequestType"), event.get("LogicalResourceId"))
    fallback_id = event.get("PhysicalResourceId") or f"{event.get('LogicalResourceId')}-failed"
    try:
        import record_writer
    except Exception as error:
        log.exception("cannot import the version record writer")
        reason = f"cannot import the bundled zae_limiter package: {type(error).__name__}: {error}"
        send_response(event, "FAILED", fallback_id, reason=reason)
        return
    try:
        physical_id, data = record_writer.apply(event)
    except record_writer.DeploymentRefused as refusal:
        log.error("deployment refused: %s", refusal)
        send_response(event, "FAILED", fallback_id, reason=str(refusal))
    except Exception as error:
        log.exception("version record update failed")
        send_response(event, "FAILED", fallback_id, reason=f"{type(error).__name__}: {error}")
    else:
        send_response(event, "SUCCESS", physical_id, data)
