"""What `pip install zae-limiter` ships: metadata, one version, and the construct from the wheel.

`test_the_wheel_synthesizes_the_documented_app` builds the wheel, unpacks it, and runs the CDK
example of docs/deploying.md (a user's own stack with `ZaeLimiter` and `grant_acquire`) with
cdk-nag, importing `zae_limiter` from the unpacked wheel only (never this checkout): the
construct must bundle its Lambdas from the installed package, offline, without Docker.
"""

from __future__ import annotations

import email
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import aggregator.test_alerts_publish as alert_tests
from support.clock import FakeClock
from support.docs import markdown_python_blocks, repo_root
from support.iam_check import RoleCheck, policies_from_template
from support.iam_eval import Deployment, resolve_statements
from support.tables import TableRef
from zae_limiter import Repository, __version__, versioning

ROOT = repo_root()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_has_one_source() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "zae_limiter.versioning.LIBRARY_VERSION"
    assert importlib.metadata.version("zae-limiter") == versioning.LIBRARY_VERSION == __version__


def test_license_and_classifiers() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    assert "Typing :: Typed" in project["classifiers"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]  # SPDX instead
    assert {"cdk", "local", "lambda", "dev"} <= set(project["optional-dependencies"])


def test_the_powertools_layer_is_the_tested_release() -> None:
    from zae_limiter.cdk.aggregator import POWERTOOLS_RELEASE

    assert importlib.metadata.version("aws-lambda-powertools") == POWERTOOLS_RELEASE
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins["aws_lambda_powertools"] == POWERTOOLS_RELEASE


def _documented_app() -> str:
    page = ROOT / "docs" / "deploying.md"
    [block] = [b for b in markdown_python_blocks(page) if "grant_acquire(" in b.source]
    assert "app.synth()" in block.source
    # As written, plus the cdk-nag AwsSolutions checks (which fail the synth on any finding).
    return block.source.replace(
        "app.synth()",
        "from cdk_nag import AwsSolutionsChecks\n"
        "cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))\n"
        "import zae_limiter; print('zae_limiter from', zae_limiter.__file__)\n"
        "app.synth()",
    )


@pytest.fixture(scope="module")
def unpacked_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the folder it is unpacked in), built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = out.glob("zae_limiter-*.whl")
    site = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return wheel, site


def test_the_sdist_holds_the_examples(tmp_path: Path) -> None:
    """The examples the README points at ship in the source distribution."""
    # From a copy of what git would commit: an egg-info left in the checkout by an earlier build
    # would otherwise add what it listed then.
    source = tmp_path / "source"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [sdist] = tmp_path.glob("zae_limiter-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    examples = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").iterdir() if p.suffix == ".py"
    }
    assert examples and examples <= names, sorted(examples - names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_constraints_pin_only_what_is_installed() -> None:
    """Every pin in constraints.txt is a package the full install has (nothing left behind)."""
    pins = [
        line.split("==", 1)[0]
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    ]
    missing = []
    for name in pins:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    assert not missing, f"pinned but not installed by `make install`: {missing}"


DOCS_PATH = re.compile(r"\bdocs/[\w./-]+?\.md\b")


def _sources() -> list[Path]:
    return sorted(
        p
        for folder in ("runtime", "tests")
        for p in (ROOT / folder).rglob("*.py*")
        if p.suffix in {".py", ".pyi"}
    )


def test_every_docs_page_cited_in_code_exists() -> None:
    """Docstrings and comments point at pages of this repository that exist, and at nothing
    outside it (the specification the project was written from does not ship)."""
    missing, outside = [], []
    for path in _sources():
        text = path.read_text()
        where = path.relative_to(ROOT)
        missing += [f"{where}: {m}" for m in DOCS_PATH.findall(text) if not (ROOT / m).is_file()]
        if "reference" + ".md" in text:
            outside.append(str(where))
    assert not missing, missing
    assert not outside, f"cite the docs page or say what is tested: {outside}"


@pytest.mark.parametrize(
    ("version", "warned"),
    [("v20.20.2", True), ("v18.20.4", True), ("v22.1.0", False), ("v26.10.0", False)],
)
def test_make_install_checks_the_node_version(tmp_path: Path, version: str, warned: bool) -> None:
    """An end-of-life Node (20, as `cdk synth` reports) is named with what to install; the
    install carries on with it. The README asks for the same LTS line the check recommends."""
    fake = tmp_path / "node"
    fake.write_text(f"#!/bin/sh\necho {version}\n")
    fake.chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check-node.sh")],
        env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
    )
    lts = re.search(r"^NODE_LTS=(\d+)", (ROOT / "scripts" / "check-node.sh").read_text(), re.M)
    assert lts is not None
    if warned:
        assert f"Node.js {version} is end-of-life" in result.stderr
        assert f"Install Node.js {lts[1]}, the current LTS" in result.stderr
    else:
        assert result.stderr == ""
    assert "check-node.sh" in (ROOT / "Makefile").read_text()


def _check_node_setting(name: str) -> str:
    found = re.search(rf"^{name}=(\d+)", (ROOT / "scripts" / "check-node.sh").read_text(), re.M)
    assert found is not None, name
    return found[1]


def test_every_page_asks_for_the_node_the_check_recommends() -> None:
    """README, deploying and contributing name the same Node.js lines as scripts/check-node.sh:
    the current LTS, and the oldest line that works; no page names another."""
    lts, minimum = _check_node_setting("NODE_LTS"), _check_node_setting("NODE_MINIMUM")
    for page in ("README.md", "docs/deploying.md", "docs/contributing.md"):
        text = " ".join((ROOT / page).read_text().split())
        assert f"Node.js {lts} (the current LTS; {minimum} or newer works" in text, page
        assert set(re.findall(r"Node(?:\.js)? (\d+)", text)) == {lts}, page


def test_a_fresh_install_warns_about_an_old_node_once(tmp_path: Path) -> None:
    """`make node` on a fresh checkout (npm tools to install) with Node 20: one warning."""
    for name in ("Makefile", "package.json", "package-lock.json"):
        shutil.copy2(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "scripts", tmp_path / "scripts")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, body in (("node", "echo v20.20.2"), ("npm", "mkdir -p node_modules")):
        (tools / name).write_text(f"#!/bin/sh\n{body}\n")
        (tools / name).chmod(0o755)
    result = subprocess.run(
        ["make", "-s", "node"],
        cwd=tmp_path,
        env={**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert (tmp_path / "node_modules" / ".zae-stamp").exists()  # npm ran
    assert result.stderr.count("is end-of-life") == 1, result.stderr


def _make(*args: str) -> str:
    return subprocess.run(
        ["make", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def test_make_help_lists_every_target() -> None:
    rules = re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M)
    listed = set(re.findall(r"^make ([a-z-]+)", _make("help"), re.M))
    assert rules and set(rules) == listed, set(rules) ^ listed


def test_make_demo_takes_a_port() -> None:
    from zae_limiter import demo

    assert "-m zae_limiter.demo --port 8123" in _make("-n", "demo", "PORT=8123")
    assert "--port" not in _make("-n", "demo").splitlines()[-1]  # a free port by default
    assert demo.parse_args(["--port", "8123"]).port == 8123
    assert demo.parse_args([]).port is None


def test_the_wheel_holds_the_construct_and_both_lambdas(unpacked_wheel: tuple[Path, Path]) -> None:
    wheel, _ = unpacked_wheel
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"zae_limiter", f"zae_limiter-{versioning.LIBRARY_VERSION}.dist-info"}
    for path in (
        "zae_limiter/py.typed",
        "zae_limiter/cdk/__init__.py",
        "zae_limiter/cdk/construct.py",
        "zae_limiter/lambdas/aggregator/handler.py",
        "zae_limiter/lambdas/version_record/handler.py",
        "zae_limiter/lambdas/version_record/record_writer.py",
    ):
        assert path in names, path
    info = f"zae_limiter-{versioning.LIBRARY_VERSION}.dist-info"
    metadata = email.message_from_bytes(zipfile.ZipFile(wheel).read(f"{info}/METADATA"))
    assert metadata["Version"] == versioning.LIBRARY_VERSION
    assert metadata["License-Expression"] == "MIT"
    assert {"cdk", "local"} <= set(metadata.get_all("Provides-Extra") or [])
    assert f"{info}/licenses/LICENSE" in names


@dataclass(frozen=True)
class WheelApp:
    """The documented app, synthesized with `zae_limiter` imported from the unpacked wheel."""

    site: Path
    stdout: str
    out: Path
    template: dict[str, Any]


@pytest.fixture(scope="module")
def wheel_app(
    unpacked_wheel: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> WheelApp:
    _, site = unpacked_wheel
    app_dir = tmp_path_factory.mktemp("my-cdk-app")
    (app_dir / "app.py").write_text(_documented_app())
    env = {
        **os.environ,
        "PYTHONPATH": str(site),  # ahead of this checkout's editable install
        "CDK_OUTDIR": str(app_dir / "cdk.out"),
        "CDK_VALIDATION": "false",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    out = app_dir / "cdk.out"
    template: dict[str, Any] = json.loads((out / "Platform.template.json").read_text())
    return WheelApp(site, result.stdout, out, template)


@pytest.mark.slow
def test_the_wheel_synthesizes_the_documented_app(wheel_app: WheelApp) -> None:
    site, out, template = wheel_app.site, wheel_app.out, wheel_app.template
    assert f"zae_limiter from {site / 'zae_limiter' / '__init__.py'}" in wheel_app.stdout
    types = [r["Type"] for r in template["Resources"].values()]
    for kind, count in (
        ("AWS::DynamoDB::Table", 1),
        ("AWS::Lambda::Function", 2),  # the aggregator and the version record step
        ("AWS::Lambda::EventSourceMapping", 1),
        ("AWS::SQS::Queue", 1),
        ("AWS::Events::EventBus", 1),  # enable_alerts
        ("AWS::CloudWatch::Alarm", 7),
        ("AWS::CloudWatch::Dashboard", 1),
        ("AWS::IAM::ManagedPolicy", 6),  # app, admin, readonly, usage, audit, alerts
    ):
        assert types.count(kind) == count, kind
    api_policy = next(
        r
        for lid, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and lid.startswith("ApiDefaultPolicy")
    )
    granted = json.dumps(api_policy["Properties"]["PolicyDocument"])
    assert "dynamodb:PutItem" in granted and "??????????#B#*" in granted
    # The Lambdas were bundled from the unpacked wheel: the runtime without the construct.
    assets = [d for d in out.iterdir() if d.name.startswith("asset.")]
    assert assets
    for asset in assets:
        assert (asset / "handler.py").is_file()
        assert (asset / "zae_limiter" / "schema.py").is_file()
        assert not (asset / "zae_limiter" / "cdk").exists()


@pytest.mark.slow
async def test_the_wheel_apps_policies_allow_what_the_alert_tests_send(
    wheel_app: WheelApp, repo: Repository, clock: FakeClock, moto_endpoint: str, table: TableRef
) -> None:
    """The same app's synthesized policies (alerts on): the EventBridge alert test, run as it is,
    sends nothing its roles refuse: the aggregator stores, claims, releases and marks alerts,
    puts them on the bus, writes snapshots and markers and checks tombstones; the app acquires;
    the on-call role (`grant_read_alerts`, the same statements as the `alerts` policy) lists
    them (support/iam_check.py)."""
    deployment = Deployment()
    policies = policies_from_template(wheel_app.template, deployment)
    on_call = next(
        r["Properties"]["PolicyDocument"]["Statement"]
        for lid, r in wheel_app.template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and lid.startswith("OnCallDefaultPolicy")
    )
    granted = resolve_statements(on_call, deployment.arns(wheel_app.template))
    unnamed = [{k: v for k, v in s.items() if k != "Sid"} for s in policies["alerts"]]
    assert granted == unnamed
    check = RoleCheck(policies, deployment)
    check.install()
    check.attach(repo.transport.client, library=True)  # opened before the check was installed
    try:
        with check.test() as checked:
            await alert_tests.test_eventbridge_gets_each_alert_once_after_a_refused_put(
                repo, clock, moto_endpoint, table
            )
    finally:
        check.uninstall()
    assert {"aggregator", "app", "admin", "alerts"} <= set(checked.by_role), checked.by_role
    for role, service, operation in [
        ("aggregator", "events", "PutEvents"),
        ("aggregator", "dynamodb", "PutItem"),  # storing alerts
        ("aggregator", "dynamodb", "TransactWriteItems"),  # snapshots, markers, tombstone checks
        ("aggregator", "dynamodbstreams", "GetRecords"),  # the event source mapping's reads
        ("alerts", "dynamodb", "Query"),
    ]:
        assert checked.calls[(role, service, operation)], (role, service, operation)
    assert checked.denials == []
