"""No silent filter: every query parameter (and batch body member) that an Airflow version's API
defines for a route fenceline serves is either honoured (declared in fenceline's document) or
refused with 400 naming it; docs/airflow-compat.md's table says which, and matches the code."""

import json
from collections.abc import Iterator
from importlib.metadata import distribution
from pathlib import Path

import pytest
import yaml
from fastapi.routing import APIRoute

from app.airflow import v1, v2
from app.main import create_app
from tests.support.airflow import run_in_airflow2
from tests.support.api import task
from tests.support.settings import app_settings

APP = create_app(app_settings("sqlite:///unused.db"))
DOCUMENT = APP.openapi()
COMPAT = Path(__file__).resolve().parents[2] / "docs" / "airflow-compat.md"
# What fenceline refuses that Airflow does not define: airflowctl's `dagrun list --start-date`
# sends `start_date` (Airflow ignores it; fenceline will not pretend to filter by it).
NOT_AIRFLOWS = {("GET", "/api/v2/dags/{}/dagRuns"): {"start_date", "end_date"}}
# What fenceline honours that the 2.10 client cannot send but Airflow 2.10's server reads.
SERVER_ONLY = {("GET", "/api/v1/dags/{}/dagRuns/{}/taskInstances/{}/tries"): {"map_index"},
               ("GET", "/api/v1/dags/{}/dagRuns/{}/taskInstances/{}/tries/{}"): {"map_index"}}


def shape(path: str) -> str:
    """A path with its parameters (and Airflow's literal `~`) blanked, to compare across documents."""
    parts = ["{}" if p.startswith("{") or p == "~" else p for p in path.split("/")]
    return "/".join(parts)


def served() -> Iterator[tuple[str, str, APIRoute]]:
    for router in (v1.router, v2.router, v2.open_router):
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                for method in route.methods:
                    yield method, route.path_format, route


def ours(method: str, path: str, route: APIRoute) -> tuple[set[str], dict[str, str]]:
    """What fenceline honours (its document's parameters, or body members) and refuses there."""
    operation = DOCUMENT["paths"][path][method.lower()]
    refused: dict[str, str] = {}
    todo = list(route.dependant.dependencies)
    while todo:
        dependency = todo.pop()
        refused.update(getattr(dependency.call, "refused", {}))
        todo.extend(dependency.dependencies)
    if "requestBody" in operation:
        body = route.body_field.field_info.annotation
        refused.update(body.refused)
        honoured = set(body.model_json_schema()["properties"])
    else:
        honoured = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
    return honoured, refused


def airflow_3() -> dict[tuple[str, str], set[str]]:
    doc = yaml.safe_load(Path(distribution("apache-airflow-client").locate_file("v2.yaml")).read_text())
    found = {}
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method.startswith("x-") or method == "parameters":
                continue
            params = [doc["components"]["parameters"][p["$ref"].split("/")[-1]] if "$ref" in p else p
                      for p in operation.get("parameters", [])]
            names = {p["name"] for p in params if p["in"] == "query"}
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                names |= set(doc["components"]["schemas"][body["$ref"].split("/")[-1]]["properties"])
            found[(method.upper(), shape(path))] = names
    return found


@pytest.fixture(scope="module")
def airflow_2_10(airflow2_python) -> dict[tuple[str, str], set[str]]:
    return {(op["method"], shape("/api/v1" + op["path"])): set(op["query"]) | set(op["body"])
            for op in run_in_airflow2(airflow2_python, "v1_surface.py")}


def table() -> list[tuple[str, str, set[str], dict[str, str]]]:
    rows = []
    for method, path, route in sorted(served(), key=lambda s: (s[1], s[0])):
        honoured, refused = ours(method, path, route)
        if honoured or refused:
            rows.append((method, path, honoured, refused))
    return rows


def names(found: set[str]) -> str:
    """`a`, `start_date_{gt,gte,lt,lte}`, ...: a range filter's bounds in one entry."""
    bounds: dict[str, list[str]] = {}
    for name in sorted(found):
        base, _, op = name.rpartition("_")
        if op in ("gt", "gte", "lt", "lte") and base:
            bounds.setdefault(base, []).append(op)
        else:
            bounds[name] = []
    return ", ".join(f"`{b}_{{{','.join(ops)}}}`" if ops else f"`{b}`" for b, ops in bounds.items()) or "–"


def markdown() -> str:
    """The table docs/airflow-compat.md carries (§2.8), as the code has it."""
    lines = ["| route | honoured as Airflow honours it | refused with 400 (why) |", "|---|---|---|"]
    for method, path, honoured, refused in table():
        reasons: dict[str, set[str]] = {}
        for name, reason in refused.items():
            reasons.setdefault(reason, set()).add(name)
        ordered = sorted(reasons.items(), key=lambda r: min(r[1]))
        said = "; ".join(f"{names(found)}: {reason}" for reason, found in ordered)
        lines.append(f"| `{method} {path}` | {names(honoured)} | {said or '–'} |")
    return "\n".join(lines)


def test_every_airflow_3_parameter_is_honoured_or_refused():
    defined = airflow_3()
    for method, path, route in served():
        if not path.startswith("/api/v2") or (method, shape(path)) not in defined:
            continue
        honoured, refused = ours(method, path, route)
        airflows = defined[(method, shape(path))]
        extra = NOT_AIRFLOWS.get((method, shape(path)), set())
        assert honoured | set(refused) == airflows | extra, (method, path, sorted(airflows ^ (honoured | set(refused))))
        assert not honoured & set(refused), (method, path)


def test_every_airflow_2_10_parameter_is_honoured_or_refused(airflow_2_10):
    for method, path, route in served():
        if not path.startswith("/api/v1") or (method, shape(path)) not in airflow_2_10:
            continue
        honoured, refused = ours(method, path, route)
        airflows = airflow_2_10[(method, shape(path))] | SERVER_ONLY.get((method, shape(path)), set())
        assert honoured | set(refused) == airflows, (method, path, sorted(airflows ^ (honoured | set(refused))))


def test_every_route_fenceline_serves_is_airflows(airflow_2_10):
    routes = {(m, shape(p)) for m, p, _ in served()}
    assert routes - set(airflow_3()) - set(airflow_2_10) == set()


def test_the_compatibility_table_is_the_codes():
    assert markdown() in COMPAT.read_text(), "docs/airflow-compat.md §2.8 is not the code's: " \
        "`python -m tests.airflow.test_parameters` prints the table as the code has it"


def example(name: str) -> str:
    return "2026-01-01T00:00:00Z" if name.endswith(("_gte", "_gt", "_lte", "_lt")) and "duration" not in name \
        else "1" if "duration" in name else "x"


REFUSED = [(method, path, name) for method, path, _, refused in table() for name in sorted(refused)]


@pytest.mark.parametrize(("method", "path", "name"), REFUSED, ids=[f"{m} {p} {n}" for m, p, n in REFUSED])
def test_a_refused_parameter_is_400_naming_it(operator, method, path, name):
    operator.create_run(task("a"), dag_id="etl", run_id="r1")
    url = path.replace("{dag_id}", "etl" if "list" not in path else "~").replace(
        "{dag_run_id}", "r1" if "list" not in path else "~")
    if method == "POST":
        resp = operator.post(url, json={name: float(example(name)) if "duration" in name else example(name)})
    else:
        resp = operator.get(url, params={name: example(name)})
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["detail"].startswith(f"{name}: ") or body["detail"].startswith(f"order_by={name}")
    if path.startswith("/api/v1"):
        assert resp.headers["content-type"] == "application/problem+json"
        assert body["type"].endswith("#section/Errors/BadRequest") and body["status"] == 400
    else:
        assert set(body) == {"detail"} and resp.headers["content-type"] == "application/json"


def test_refused_order_by_fields_are_400_naming_them(operator):
    operator.create_run(task("a"), dag_id="etl", run_id="r1")
    for url, field in (("/api/v2/dags/etl/dagRuns/r1/taskInstances", "-duration"), ("/api/v2/dags", "last_run_state"),
                       ("/api/v2/dags/~/dagRuns", "conf"), ("/api/v1/dags/~/dagRuns", "conf"),
                       ("/api/v2/dags/~/dagRuns/~/taskInstances", "no_such_field")):
        resp = operator.get(url, params={"order_by": field})
        assert resp.status_code == 400 and f"order_by={field}: " in json.dumps(resp.json()), (url, resp.text)


if __name__ == "__main__":
    print(markdown())
