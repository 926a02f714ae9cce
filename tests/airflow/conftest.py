"""The Airflow-compatibility tests' fixtures: the 2.10 client's Python (tests/support/airflow),
and the calls it makes against a live server."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import airflow
from tests.support.airflow import run_in_airflow2
from tests.support.api import ADMIN_PASSWORD


@pytest.fixture(scope="session")
def airflow2_python() -> Path:
    return airflow.airflow2_python()


@pytest.fixture
def v1_calls(live_server, airflow2_python) -> Callable[[list], list]:
    """Calls of the 2.10 client against the live server, as the operator (tests/support/airflow/v1_calls.py)."""

    def call(calls: list) -> list:
        return run_in_airflow2(airflow2_python, "v1_calls.py", live_server.url, "admin", ADMIN_PASSWORD,
                               stdin=json.dumps(calls))

    return call
