"""cdk-nag AwsSolutions checks: zero unacknowledged findings, and no stale acknowledgement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from cdk_nag import AwsSolutionsChecks
from cdk_stacks import FullStack

import zae_limiter.cdk.construct
from zae_limiter.cdk import ZaeLimiterStack

ACKNOWLEDGED = "aws:cdk:acknowledged-rules"


def synth_with_nag(outdir: Path) -> cdk.App:
    app = cdk.App(outdir=str(outdir))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    ZaeLimiterStack(app, "Default")
    FullStack(app, "Full")
    app.synth()
    return app


def acknowledgements(outdir: Path) -> dict[tuple[str, str], str]:
    """(construct path, rule) -> reason, from every stack's metadata."""
    found = {}
    for metadata in outdir.glob("*.metadata.json"):
        for path, entries in json.loads(metadata.read_text()).items():
            for entry in entries:
                if entry["type"] == ACKNOWLEDGED:
                    for rule, reason in entry["data"].items():
                        found[(path, rule.removeprefix("Annotation::"))] = reason
    return found


def violations(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(construct path of the resource's parent, rule) of every finding in a validation report."""
    return {
        (violation["constructPath"].rsplit("/", 1)[0], rule["ruleName"])
        for plugin in report["pluginReports"]
        for rule in plugin["violations"]
        for violation in rule["violatingConstructs"]
    }


@pytest.fixture(scope="module")
def with_acknowledgements(tmp_path_factory: pytest.TempPathFactory) -> Path:
    outdir = tmp_path_factory.mktemp("nag")
    synth_with_nag(outdir)  # raises on any unacknowledged finding
    return outdir


def test_no_unacknowledged_findings(with_acknowledgements: Path) -> None:
    report = json.loads((with_acknowledgements / "validation-report.json").read_text())
    assert report["pluginReports"] == []
    acks = acknowledgements(with_acknowledgements)
    assert {rule.split("[")[0] for _, rule in acks} == {
        "AwsSolutions-SQS3",
        "AwsSolutions-IAM5",
        "AwsSolutions-L1",
        "AwsSolutions-S1",
    }
    for (path, rule), reason in acks.items():
        assert len(reason) >= 60, f"{path} {rule}: the reason must explain itself"


def test_every_acknowledgement_covers_a_real_finding(
    with_acknowledgements: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the acknowledgements the findings are exactly the acknowledged ones."""
    synth_acks = acknowledgements(with_acknowledgements)
    monkeypatch.setattr(zae_limiter.cdk.construct, "acknowledge_findings", lambda limiter: None)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        synth_with_nag(tmp_path / "without")
    report = json.loads((tmp_path / "without" / "validation-report.json").read_text())
    expected = {(f"/{path.strip('/')}", rule) for path, rule in synth_acks}
    found = {(f"/{path}", rule) for path, rule in violations(report)}
    # A finding on X/Role/DefaultPolicy is acknowledged on X/Role: compare by prefix.
    for path, rule in found:
        assert any(
            rule == ack_rule and path.startswith(ack_path) for ack_path, ack_rule in expected
        ), f"unexpected finding {rule} on {path}"
    for ack_path, ack_rule in expected:
        assert any(rule == ack_rule and path.startswith(ack_path) for path, rule in found), (
            f"stale acknowledgement {ack_rule} on {ack_path}"
        )
