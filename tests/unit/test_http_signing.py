"""The lean path's SigV4 signature equals botocore's for the same request (dynamo/http.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
from unittest import mock

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from zae_limiter.dynamo.http import Signer

NOW = dt.datetime(2026, 11, 30, 12, 34, 56, tzinfo=dt.UTC)
BODY = b'{"TableName":"zae-limiter","Key":{"PK":{"S":"a"},"SK":{"S":"#B"}}}'


@pytest.mark.parametrize("token", [None, "session-token/with+chars="])
@pytest.mark.parametrize("region", ["us-east-1", "eu-west-3"])
def test_signature_matches_botocore(token: str | None, region: str) -> None:
    credentials = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    host = f"dynamodb.{region}.amazonaws.com"
    signer = Signer(credentials, region)
    frozen = asyncio.run(signer.frozen())
    ours = signer.headers(frozen, host, "DynamoDB_20120810.UpdateItem", BODY, NOW.timestamp())

    request = AWSRequest(
        method="POST",
        url=f"https://{host}/",
        data=BODY,
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.UpdateItem",
        },
    )
    with mock.patch("botocore.auth.get_current_datetime", return_value=NOW.replace(tzinfo=None)):
        SigV4Auth(credentials, "dynamodb", region).add_auth(request)
    assert request.headers["X-Amz-Date"] == ours["x-amz-date"]
    assert request.headers["Authorization"] == ours["authorization"]
    if token:
        assert ours["x-amz-security-token"] == token


def test_the_signing_key_is_cached_per_day() -> None:
    signer = Signer(Credentials("AKID", "secret"), "us-east-1")
    frozen = asyncio.run(signer.frozen())
    signer.headers(frozen, "h", "t", b"", NOW.timestamp())
    first = signer._key
    signer.headers(frozen, "h", "t", b"{}", NOW.timestamp() + 60)
    assert signer._key is first
    signer.headers(frozen, "h", "t", b"", NOW.timestamp() + 86_400)
    assert signer._key is not first
