"""What an install carries: the lock every install uses, a runtime without dev tools, and the
S3 store's library behind its extra with a clear refusal where it is missing."""

import importlib.metadata
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.ports import free_port
from tests.support.servers import FENCELINE, START_TIMEOUT, clean_env

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked() -> dict[str, str]:
    """constraints.txt: each package's exact version."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(name): version for name, version in pins}


def requirements(group: list[str]) -> list[Requirement]:
    return [Requirement(text) for text in group]


def test_every_dependency_has_an_upper_bound_and_the_lock_pins_a_version_inside_it():
    pins = locked()
    declared = requirements(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        declared += [r for r in requirements(extra) if canonicalize_name(r.name) != "fenceline"]
    for requirement in declared:
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        bounds = {spec.operator for spec in requirement.specifier}
        assert bounds & {"<", "<=", "==", "~="}, f"{requirement} has no upper bound"
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in constraints.txt: run .ci/lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {name}=={pins[name]}, outside {requirement}: run .ci/lock"


def test_this_environment_is_the_lock():
    """The README's install (-c constraints.txt) gives the locked version of every dependency."""
    pins = locked()
    for name, version in pins.items():
        if name in ("pip",):
            continue
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{name} is locked but not installed")
        assert installed == version, f"{name} {installed} is installed, constraints.txt says {version}"


def test_a_runtime_install_carries_no_dev_tool_and_no_s3_library():
    runtime = {canonicalize_name(r.name) for r in requirements(PROJECT["dependencies"])}
    dev = {canonicalize_name(r.name) for r in requirements(PROJECT["optional-dependencies"]["dev"])} - {"fenceline"}
    assert not runtime & dev, runtime & dev
    assert "boto3" not in runtime
    assert [r.name for r in requirements(PROJECT["optional-dependencies"]["s3"])] == ["boto3"]


@pytest.fixture
def without_boto3(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python finds no boto3, as in an install without the s3 extra: a
    boto3 package first on the path that fails to import as a missing one does."""
    fake = tmp_path / "no-boto3" / "boto3"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'boto3'\", name='boto3')\n")
    return {**clean_env(tmp_path / "data"), "PYTHONPATH": str(fake.parent)}


def one_line(done: subprocess.CompletedProcess, status: int) -> str:
    assert done.returncode == status, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr
    return line


def test_serve_with_an_s3_store_and_no_boto3_is_refused_in_one_line(tmp_path, without_boto3):
    done = subprocess.run([*FENCELINE, "serve", "--port", str(free_port())], cwd=tmp_path,
                          env={**without_boto3, "FENCELINE_LOG_STORE": "s3://logs/fenceline"},
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    line = one_line(done, 2)
    assert line.startswith("fenceline: FENCELINE_LOG_STORE=") and "pip install 'fenceline[s3]'" in line, line
    assert "listening on" not in done.stdout + done.stderr


def test_logs_copy_to_s3_without_boto3_is_a_usage_error(tmp_path, without_boto3):
    done = subprocess.run([*FENCELINE, "logs", "copy", "--to", "s3://logs"], cwd=tmp_path, env=without_boto3,
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    assert done.returncode == 2, done.stderr
    assert "pip install 'fenceline[s3]'" in done.stderr and "Traceback" not in done.stderr
