"""An SDK generated from /openapi.json works: the document is complete enough for a generator
(openapi-python-client) to build a typed client that drives the service over HTTP."""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.main import create_app
from tests.api import ADMIN_PASSWORD
from tests.conftest import app_settings


@pytest.fixture(scope="session")
def sdk(tmp_path_factory, db_url):
    """The generated client package, importable."""
    root = tmp_path_factory.mktemp("sdk")
    spec = root / "openapi.json"
    spec.write_text(json.dumps(create_app(app_settings(db_url)).openapi()))
    generator = Path(sys.executable).with_name("openapi-python-client")
    result = subprocess.run([str(generator), "generate", "--path", str(spec), "--output-path", str(root / "out"),
                             "--meta", "none"], capture_output=True, text=True, timeout=300, cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(root))
    yield importlib.import_module("out")
    sys.path.remove(str(root))


def test_a_generated_client_admits_claims_and_settles(sdk, live_server):
    from out.api.auth import auth_login
    from out.api.execution import execution_claim, execution_report
    from out.api.identity import identity_admit_execution
    from out.api.orchestration import (
        orchestration_create_run,
        orchestration_read_task_instance,
    )
    from out.models import AdmissionRequest, ClaimRequest, Problem, Report, RunCreate

    anonymous = sdk.Client(base_url=live_server.url)
    token = auth_login.sync(client=anonymous, body=sdk.models.AuthLoginLoginRequest(
        username="admin", password=ADMIN_PASSWORD)).access_token
    operator = sdk.AuthenticatedClient(base_url=live_server.url, token=token)

    admitted = identity_admit_execution.sync("sdk-worker", client=operator, body=AdmissionRequest.from_dict(
        {"swarm": "sdk", "runtime_backend": "local"}))
    assert admitted.generation == 1
    refused = identity_admit_execution.sync("sdk-worker", client=operator, body=AdmissionRequest.from_dict(
        {"swarm": "sdk", "runtime_backend": "local"}))
    assert isinstance(refused, Problem) and refused.type_ == "stale-predecessor"

    run = orchestration_create_run.sync(client=operator, body=RunCreate.from_dict(
        {"dag_id": "sdk", "run_id": "r1", "tasks": [{"task_id": "t", "payload": {"command": ["true"]}}]}))
    worker = sdk.AuthenticatedClient(base_url=live_server.url, token=admitted.worker_token)
    (item,) = execution_claim.sync(client=worker, body=ClaimRequest(limit=5)).items
    assert item.correlation.task_id == "t" and item.correlation.attempt_epoch == 1
    agent = sdk.AuthenticatedClient(base_url=live_server.url, token=item.attempt_token)
    for state in ("running", "success"):
        assert execution_report.sync(client=agent, body=Report.from_dict({"state": state})).state == state
    ti = orchestration_read_task_instance.sync(run.task_instances[0].ti_id, client=operator)
    assert (ti.state, ti.try_number, ti.attempt_epoch) == ("success", 1, 1)
