"""`local up|status|env|down` (docs/cli.md): a second DynamoDB Local started by the CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from zae_limiter import SyncRateLimiter, SyncRepository
from zae_limiter.cli import cli
from zae_limiter.local import free_port
from zae_limiter.local.engine import LOCAL_ACCESS_KEY_ID, LOCAL_SECRET_ACCESS_KEY
from zae_limiter.local.processes import process_cmdline


def run(args: list[str], state: Path, code: int = 0) -> Result:
    result = CliRunner().invoke(
        cli, args, env={"ZAEL_LOCAL_STATE": str(state), "ZAEL_ENDPOINT_URL": None}
    )
    assert result.exit_code == code, f"{args}: {result.stdout}\n{result.stderr}"
    return result


def test_up_status_env_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    port = free_port()
    try:
        up = run(["--table", "local-cli", "local", "up", "--port", str(port)], state)
        assert f"export ZAEL_ENDPOINT_URL='http://127.0.0.1:{port}'" in up.stdout
        assert "export ZAEL_TABLE='local-cli'" in up.stdout
        assert "# table local-cli: created" in up.stdout
        assert "aggregator started" in up.stderr
        assert f"starting dynamodb-local on 127.0.0.1:{port}" in up.stderr
        second = run(
            ["local", "up", "--port", str(port), "--table", "local-cli", "-o", "json"], state
        )
        again = json.loads(second.stdout)
        assert again["running"] is True and again["created_table"] is False
        assert "starting" not in second.stderr  # nothing was started
        assert f"dynamodb-local already running on http://127.0.0.1:{port}" in second.stderr
        status = json.loads(run(["local", "status", "-o", "json"], state).stdout)
        assert status["port"] == port and "local-cli" in status["tables"]
        assert status["aggregator"]["running"] is True
        assert len(status["pids"]) == 2  # the engine and the aggregator
        # records that keep failing go to a dead-letter file beside the checkpoint
        command = process_cmdline(status["aggregator"]["pid"]) or ""
        assert f"--dead-letter-file {status['state_dir']}/aggregator-dead-letters.jsonl" in command
        text = run(["local", "status"], state).stdout
        assert "local engine: dynamodb-local running" in text and "aggregator:" in text
        # restart: the aggregator alone, a new process; status reports that one only
        before = status["aggregator"]["pid"]
        restarted = json.loads(run(["local", "restart", "-o", "json"], state).stdout)
        assert restarted["aggregator_pid"] not in (None, before)
        after = json.loads(run(["local", "status", "-o", "json"], state).stdout)
        assert after["aggregator"]["pid"] == restarted["aggregator_pid"]
        assert after["port"] == port and "local-cli" in after["tables"]  # the engine stayed
        env = run(["local", "env", "--format", "dotenv"], state).stdout
        assert f"ZAEL_ENDPOINT_URL=http://127.0.0.1:{port}" in env
        checked = run(
            ["--table", "local-cli", "--endpoint-url", f"http://127.0.0.1:{port}", "check"], state
        )
        assert "compatible" in checked.stdout
        endpoint = ["--table", "local-cli", "--endpoint-url", f"http://localhost:{port}"]
        overview = run([*endpoint, "status"], state).stdout
        [line] = [x for x in overview.splitlines() if x.startswith("aggregator function:")]
        assert f"local process (pid {after['aggregator']['pid']}" in line
        assert "(local process, not recorded)" in overview and "none recorded" not in overview
        assert (
            json.loads(run([*endpoint, "status", "-o", "json"], state).stdout)["local_aggregator"][
                "pid"
            ]
            == after["aggregator"]["pid"]
        )
        # One engine per port: another engine on this port is refused.
        assert (
            "already running on port"
            in run(["local", "up", "--port", str(port), "--engine", "moto"], state, code=1).stderr
        )
    finally:
        down = run(["local", "down", "-o", "json"], state)
    assert {p["role"] for p in json.loads(down.stdout)["stopped"]} == {"engine", "aggregator"}
    assert run(["local", "status"], state).stdout.strip() == "local engine: not running"
    assert run(["local", "down"], state).stdout.strip() == "nothing was running"


def test_env_without_an_engine_and_bad_input(tmp_path: Path) -> None:
    out = run(["local", "env", "--port", "9000", "--format", "fish"], tmp_path).stdout
    assert "set -gx ZAEL_ENDPOINT_URL 'http://127.0.0.1:9000';" in out
    data = json.loads(run(["local", "env", "-o", "json"], tmp_path).stdout)
    assert data["ZAEL_ENDPOINT_URL"] == "http://127.0.0.1:8000"
    assert "is not one of" in run(["local", "env", "--format", "csh"], tmp_path, code=2).stderr
    assert "no local engine is running" in run(["local", "restart"], tmp_path, code=1).stderr
    assert (
        "not both"
        in run(["local", "up", "--data-dir", str(tmp_path), "--in-memory"], tmp_path, code=2).stderr
    )


def test_up_with_an_alerts_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`local up --alerts-log FILE`: the background aggregator appends each alert as a JSON
    line, and `local restart` keeps appending to the same file."""
    state, log, port = tmp_path / "state", tmp_path / "alerts.jsonl", free_port()
    endpoint = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", LOCAL_ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", LOCAL_SECRET_ACCESS_KEY)
    monkeypatch.setenv("ALERT_HOLD_SECONDS", "0")  # (alerts.held: 300 s by default)
    table = ["--table", "local-alerts", "--endpoint-url", endpoint]

    def spend(entity: str) -> None:
        with (
            SyncRepository.open(table="local-alerts", endpoint_url=endpoint) as repo,
            SyncRateLimiter(repo).acquire(entity, "budget", consume={"weekly": 60}),
        ):
            pass

    def lines(count: int) -> list[dict[str, object]]:
        started = time.monotonic()  # a ceiling against a hung process, not a timing check
        while not log.exists() or len(log.read_text().splitlines()) < count:
            assert time.monotonic() - started < 120, "the aggregator wrote no alert"
            time.sleep(0.1)
        return [json.loads(line) for line in log.read_text().splitlines()]

    try:
        up = ["local", "up", "--port", str(port), "--alerts-log", str(log)]
        run(["--table", "local-alerts", *up], state)
        limits = ["-l", "weekly:100@cron(0 0 * * 1)", "--alert", "weekly:50"]
        run([*table, "resource", "set-defaults", "budget", *limits], state)
        spend("user-1")
        assert [(x["entity_id"], x["threshold"]) for x in lines(1)] == [("user-1", 50)]
        run(["local", "restart"], state)
        spend("user-2")
        assert [(x["entity_id"], x["threshold"]) for x in lines(2)][1] == ("user-2", 50)
        listed = json.loads(run([*table, "-o", "json", "alerts", "list"], state).stdout)
        assert sorted(a["entity_id"] for a in listed["alerts"]) == ["user-1", "user-2"]
    finally:
        run(["local", "down"], state)
