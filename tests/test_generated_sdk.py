"""SDKs generated from the live /openapi.json work with no hand edits: openapi-python-client and
openapi-generator 7.26 (`-g python`, the generator Airflow's own client is made with) each build
a typed client that runs admission -> claim -> running -> heartbeat -> log append -> renew ->
success, reads the try's log as text, and branches on a stale report's typed
`should_terminate`. Neither generator warns about anything in fenceline's document."""

import hashlib
import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.api import ADMIN_PASSWORD

BIN = Path(sys.executable).parent
# What openapi-generator 7.26 prints for every document: it has not finished OpenAPI 3.1 support
# (FastAPI documents are 3.1, as Airflow's are), and a rate-limited internal notice that appears
# on a one-path document too. Anything else it warns about would be fenceline's doing.
GENERATOR_NOTICES = ("OpenAPI 3.1 support is still in beta", "Failed to get the schema name: null")
RUN = {"dag_id": "sdk", "tasks": [{"task_id": "t", "payload": {"command": ["true"]}}]}
# What each generator made of each document: the servers of both databases serve the same one,
# generated once (a generator run takes seconds to tens of seconds).
GENERATED: dict[tuple[str, bytes], tuple[Path, str]] = {}


def generate(command: list[str], cwd: Path) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def generated(name: str, spec: Path, tmp_path_factory, command: Callable[[Path], list[str]]) -> tuple[Path, str]:
    """The directory `command(directory)` generated `spec`'s SDK in, and what it printed."""
    key = (name, hashlib.sha256(spec.read_bytes()).digest())
    if key not in GENERATED:
        root = tmp_path_factory.mktemp(name)
        GENERATED[key] = (root, generate(command(root), root))
    return GENERATED[key]


@pytest.fixture(scope="module")
def spec(shared_server, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "openapi.json"
    path.write_bytes(httpx.get(f"{shared_server.url}/openapi.json").content)
    return path


@pytest.fixture(scope="module")
def python_client(spec, tmp_path_factory):
    """openapi-python-client's package, importable as `opc`."""
    root, output = generated("opc", spec, tmp_path_factory, lambda root: [
        str(BIN / "openapi-python-client"), "generate", "--path", str(spec), "--output-path", str(root / "opc"),
        "--meta", "none"])
    assert "Warning" not in output, output
    sys.path.insert(0, str(root))
    yield importlib.import_module("opc")
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m == "opc" or m.startswith("opc.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def generator_client(spec, tmp_path_factory):
    """openapi-generator's package, importable as `fenceline_client`."""
    root, output = generated("ogen", spec, tmp_path_factory, lambda root: [
        str(BIN / "openapi-generator-cli"), "generate", "-g", "python", "-i", str(spec), "-o", str(root),
        "--package-name", "fenceline_client", "--global-property",
        "apiTests=false,modelTests=false,apiDocs=false,modelDocs=false"])
    warnings = [line for line in output.splitlines()
                if "WARN" in line and not any(notice in line for notice in GENERATOR_NOTICES)]
    assert warnings == [], "\n".join(warnings)
    sys.path.insert(0, str(root))
    yield importlib.import_module("fenceline_client")
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m.startswith("fenceline_client")]:
        del sys.modules[name]


def test_an_openapi_python_client_sdk_runs_an_attempt_through(python_client, shared_server):
    from opc.api.auth import login
    from opc.api.execution import claim, heartbeat, renew, report
    from opc.api.identity import admit_execution
    from opc.api.logs import append_log, read_try_log
    from opc.api.orchestration import create_run, read_task_instance
    from opc.models import (
        AdmissionRequest,
        ClaimRequest,
        ExecutionConflict,
        LogAppend,
        LoginRequest,
        Report,
        RunCreate,
        StaleReport,
    )

    url = shared_server.url
    token = login.sync(client=python_client.Client(base_url=url),
                       body=LoginRequest(username="admin", password=ADMIN_PASSWORD)).access_token
    operator = python_client.AuthenticatedClient(base_url=url, token=token)
    seat = AdmissionRequest.from_dict({"swarm": "sdk", "runtime_backend": "local"})
    admitted = admit_execution.sync("opc-worker", client=operator, body=seat)
    refused = admit_execution.sync("opc-worker", client=operator, body=seat)
    assert isinstance(refused, ExecutionConflict) and refused.type_ == "stale-predecessor"
    assert (refused.current_execution_id, refused.current_generation) == (admitted.execution_id, 1)

    run = create_run.sync(client=operator, body=RunCreate.from_dict({**RUN, "run_id": "opc"}))
    worker = python_client.AuthenticatedClient(base_url=url, token=admitted.worker_token)
    (item,) = claim.sync(client=worker, body=ClaimRequest(limit=5)).items
    assert item.payload.command == ["true"]  # a typed Payload, not a dict
    agent = python_client.AuthenticatedClient(base_url=url, token=item.attempt_token)
    assert report.sync(client=agent, body=Report.from_dict({"state": "running"})).state == "running"
    assert heartbeat.sync(client=agent).attempt_epoch == item.correlation.attempt_epoch
    assert append_log.sync(client=agent, body=LogAppend(offset=0, content="hello from opc\n")).size == 15
    renewed = python_client.AuthenticatedClient(base_url=url, token=renew.sync(client=agent).attempt_token)
    assert report.sync(client=renewed, body=Report.from_dict({"state": "success"})).state == "success"

    ti_id = run.task_instances[0].ti_id
    read = read_task_instance.sync(ti_id, client=operator)
    assert read.state == "success" and read.payload.command == ["true"]
    assert "hello from opc" in read_try_log.sync(ti_id, 1, client=operator)
    stale = heartbeat.sync(client=renewed)  # the attempt has ended
    assert isinstance(stale, StaleReport) and stale.should_terminate is True and stale.state == "success"


def test_an_openapi_generator_sdk_runs_an_attempt_through(generator_client, shared_server):
    fc = generator_client

    def api(token: str | None = None):
        return fc.ApiClient(fc.Configuration(host=shared_server.url, access_token=token))

    token = fc.AuthApi(api()).login(fc.LoginRequest(username="admin", password=ADMIN_PASSWORD)).access_token
    operator = api(token)
    seat = fc.AdmissionRequest(swarm="sdk", runtime_backend="local")
    admitted = fc.IdentityApi(operator).admit_execution("og-worker", seat)
    with pytest.raises(fc.exceptions.ConflictException) as refused:
        fc.IdentityApi(operator).admit_execution("og-worker", seat)
    assert refused.value.data.type == "stale-predecessor"
    assert refused.value.data.current_execution_id == admitted.execution_id

    run = fc.OrchestrationApi(operator).create_run(fc.RunCreate.from_dict({**RUN, "run_id": "og"}))
    (item,) = fc.ExecutionApi(api(admitted.worker_token)).claim(fc.ClaimRequest(limit=5)).items
    assert isinstance(item.payload, fc.Payload) and item.payload.command == ["true"]
    assert run.task_instances[0].payload.command == ["true"]
    agent = fc.ExecutionApi(api(item.attempt_token))
    assert agent.report(fc.Report(state="running")).state == "running"
    assert agent.heartbeat().attempt_epoch == item.correlation.attempt_epoch
    assert fc.LogsApi(api(item.attempt_token)).append_log(fc.LogAppend(offset=0, content="hello from og\n")).size == 14
    renewed = fc.ExecutionApi(api(agent.renew().attempt_token))
    assert renewed.report(fc.Report(state="success")).state == "success"

    ti_id = run.task_instances[0].ti_id
    assert "hello from og" in fc.LogsApi(operator).read_try_log(ti_id, 1)
    with pytest.raises(fc.exceptions.ConflictException) as stale:
        renewed.heartbeat()  # the attempt has ended
    terminate = stale.value.data.should_terminate
    assert terminate is True and stale.value.data.state == "success"
