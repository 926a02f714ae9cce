"""The OpenAPI document's conformance check (contract 7): schemathesis sends an operation valid and
invalid requests, as the caller the route expects (the operator, a worker or an attempt's agent),
and every answer must be a documented status, in a documented media type and shape, and never a
5xx. Its tests: tests/test_schema_conformance.py (fenceline's own routes) and
tests/airflow/test_schema_conformance.py (the Airflow API's)."""

from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.main import create_app
from tests.support.api import Operator, Worker, task
from tests.support.servers import LiveServer
from tests.support.settings import app_settings

# At most 25 examples per operation: most of them valid, the rest not.
EXAMPLES = {GenerationMode.POSITIVE: 15, GenerationMode.NEGATIVE: 10}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]
SCHEMA = schemathesis.openapi.from_dict(create_app(app_settings("sqlite:///unused.db")).openapi())  # no connection
OPERATIONS = [(op.method.upper(), op.path) for op in (result.ok() for result in SCHEMA.get_all_operations())]
AIRFLOW = [(method, path) for method, path in OPERATIONS if path.startswith("/api/")]
NATIVE = [(method, path) for method, path in OPERATIONS if not path.startswith("/api/")]


def token_kind(path: str) -> str:
    """Whose token a request to `path` carries: each route's own caller."""
    if path.startswith("/v1/attempts/") or path == "/v1/auth/renew":
        return "attempt"
    return "worker" if path == "/v1/dispatch/claim" else "operator"


def callers(server: LiveServer) -> dict[str, str]:
    """A token of each kind: the operator's, a worker's, and the attempt that worker claimed
    (a run of two tasks, so one is left to claim)."""
    operator = Operator(server.client())
    operator.create_run(task("a"), task("b"))
    worker = Worker(operator)
    attempt = worker.claim_one()
    return {"operator": operator.token, "worker": worker.headers["Authorization"].split()[1],
            "attempt": attempt.token}


def shorten_wait(case: Any) -> None:
    """A waiting claim's valid wait (up to 30 s) cut to a fraction of a second: the answer is
    the same empty list, without the wait (an invalid one is refused before any waiting)."""
    body = case.body
    if isinstance(body, dict) and isinstance(wait := body.get("wait_seconds"), int | float) and 0 < wait <= 30:
        body["wait_seconds"] = min(wait, 0.2)


def ids(operations: list[tuple[str, str]]) -> list[str]:
    return [f"{method} {path}" for method, path in operations]


def every_answer_is_documented(server: LiveServer, method: str, path: str) -> None:
    """Every answer of `method` `path` to schemathesis's examples, as its caller, is documented."""
    operation = SCHEMA[path][method]
    headers = {"Authorization": f"Bearer {callers(server)[token_kind(path)]}"}
    for mode, examples in EXAMPLES.items():
        @given(operation.as_strategy(mode))
        # The same examples on every run (derandomize): CI fails on a change, not on a draw.
        @settings(max_examples=examples, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                  derandomize=True, suppress_health_check=list(HealthCheck))
        def answers_as_documented(case: Any) -> None:
            shorten_wait(case)
            case.call_and_validate(base_url=server.url, headers=headers, checks=CHECKS)

        try:
            answers_as_documented()
        except Unsatisfiable:
            assert mode is GenerationMode.NEGATIVE  # nothing in the operation can be invalid
