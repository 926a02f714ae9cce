"""Airflow resources fenceline does not have: their routes answer 404 in the Airflow version's
shape, saying so, whatever the method (never a neighbouring route's 405 or 422)."""

from typing import Any

from starlette.convertors import Convertor, register_url_convertor

from app.airflow.service import not_found

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]
NO_DAG_FILES = "fenceline keeps no DAG files: a DAG is known by its runs"

# Each resource, the reason fenceline has none, and the paths Airflow serves it under
# (`{rest}` is anything below).
ABSENT = {
    "connections": ("fenceline stores no connections", ["/connections"]),
    "variables": ("fenceline stores no variables", ["/variables"]),
    "XComs": ("fenceline passes no XComs between tasks", [
        "/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/xcomEntries"]),
    "assets": ("fenceline schedules nothing by assets", ["/assets", "/dags/{dag_id}/assets"]),
    "datasets": ("fenceline schedules nothing by datasets", ["/datasets", "/dags/{dag_id}/datasets"]),
    "backfills": ("fenceline runs what POST /v1/runs creates: there is no backfill", ["/backfills"]),
    "configuration": ("fenceline's settings are its own (FENCELINE_* variables), not Airflow's", ["/config"]),
    "plugins": ("fenceline loads no Airflow plugins", ["/plugins"]),
    "providers": ("fenceline installs no Airflow providers", ["/providers"]),
    "DAG sources, tags, versions, stats, warnings, reports or import errors": (NO_DAG_FILES, [
        "/dagSources", "/dagTags", "/dagStats", "/dagWarnings", "/dagReports", "/importErrors", "/parseDagFile",
        "/dags/{dag_id}/dagVersions"]),
    "event logs": ("fenceline keeps no Airflow event log (its own request log and the attempt records say "
                   "what happened)", ["/eventLogs"]),
    "users, roles or permissions": ("fenceline has one operator login (POST /auth/token)", [
        "/users", "/roles", "/permissions"]),
    "task dependencies": ("fenceline explains no scheduling decisions of a task instance", [
        "/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/dependencies",
        "/dags/{dag_id}/dagRuns/{dag_run_id}/taskInstances/{task_id}/{map_index:map_index}/dependencies"]),
}


class MapIndex(Convertor[int]):
    """A map index in a path: an integer, so that a literal segment in its place
    (`…/{task_id}/xcomEntries`) is another route, never a map index that fails to parse."""

    regex = "-?[0-9]+"

    def convert(self, value: str) -> int:
        return int(value)

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("map_index", MapIndex())
MAP_INDEX = "{map_index:map_index}"


def add_absent_routes(router: Any, version: str) -> None:
    """Add to `router` (one Airflow version's) a 404 route for each absent resource, at each of
    its paths and below."""
    for resource, (reason, paths) in ABSENT.items():
        answer = _answering(f"{resource}: {reason}. This is fenceline's {version}-compatible API "
                            "(docs/airflow-compat.md says what it serves).")
        for path in paths:
            for at in (path, path + "/{rest:path}"):
                router.add_api_route(at, answer, methods=METHODS, include_in_schema=False)


def _answering(detail: str) -> Any:
    def absent() -> None:
        raise not_found(detail)

    return absent
