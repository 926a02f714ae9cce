"""Airflow 2.10's REST API as its official client defines it; run by the second virtual
environment. Prints a JSON list of every operation: method, path (relative to /api/v1), its
query parameters, and the members of its request body."""

import importlib
import inspect
import json
import pkgutil

import airflow_client.client as af
import airflow_client.client.api as apis


def _members(endpoint) -> list[str]:
    """The members of the operation's body model, if it takes one."""
    names = [p for p in endpoint.params_map["all"] if endpoint.location_map.get(p) == "body"]
    return [m for name in names for kind in endpoint.openapi_types[name]
            for m in getattr(kind, "openapi_types", {})]


def main() -> list:
    client = af.ApiClient(af.Configuration(host="http://unused/api/v1"))
    found = []
    for info in pkgutil.iter_modules(apis.__path__):
        module = importlib.import_module(f"{apis.__name__}.{info.name}")
        for _, api in inspect.getmembers(module, inspect.isclass):
            if not api.__name__.endswith("Api") or api.__module__ != module.__name__:
                continue
            for endpoint in vars(api(client)).values():
                if type(endpoint).__name__ != "Endpoint":
                    continue
                found.append({"method": endpoint.settings["http_method"], "path": endpoint.settings["endpoint_path"],
                              "query": [p for p in endpoint.params_map["all"]
                                        if endpoint.location_map.get(p) == "query"],
                              "body": _members(endpoint)})
    return found


if __name__ == "__main__":
    print(json.dumps(main()))
