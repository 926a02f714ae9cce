"""Calls the official Airflow 2.10 client makes; run by the second virtual environment.

Usage: python v1_calls.py HOST USERNAME PASSWORD, with a JSON list of calls on stdin, each
`[api, method, args, kwargs]` (say `["TaskInstanceApi", "get_task_instances", ["~", "~"],
{"state": ["running"]}]`). Prints a JSON list: each call's deserialised answer as a dict, or
`{"status": n}` for an error status. A deserialisation error fails the process.
"""

import datetime
import importlib
import json
import re
import sys

import airflow_client.client as af


def _api(name: str):
    module = re.sub(r"(?<!^)(?=[A-Z])", "_", name.replace("DAG", "Dag")).lower()  # DAGRunApi -> dag_run_api
    return getattr(importlib.import_module(f"airflow_client.client.api.{module}"), name)


def _argument(value):
    """Dates travel as ISO strings in the JSON; the client wants datetimes."""
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT.*", value):
        return datetime.datetime.fromisoformat(value)
    if isinstance(value, dict) and "__model__" in value:  # a request body: {"__model__": name, ...}
        name = value.pop("__model__")
        module = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
        model = getattr(importlib.import_module(f"airflow_client.client.model.{module}"), name)
        return model(**{k: _argument(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_argument(v) for v in value]
    return value


def main(host: str, username: str, password: str, calls: list) -> list:
    config = af.Configuration(host=f"{host}/api/v1", username=username, password=password)
    out = []
    with af.ApiClient(config) as client:
        for api, method, args, kwargs in calls:
            call = getattr(_api(api)(client), method)
            try:
                answer = call(*[_argument(a) for a in args], **{k: _argument(v) for k, v in kwargs.items()})
            except af.ApiException as exc:
                out.append({"status": exc.status})
                continue
            out.append(answer.to_dict())
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4], json.load(sys.stdin)), default=str))
