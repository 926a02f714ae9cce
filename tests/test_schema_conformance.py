"""fenceline's own routes tell the truth (contract 7): every answer to schemathesis's valid and
invalid requests is a documented status, in a documented media type and shape, and never a 5xx
(tests/support/conformance.py; the Airflow API's routes: tests/airflow/test_schema_conformance.py)."""

import pytest
from sqlalchemy import Engine

from tests.support.conformance import NATIVE, every_answer_is_documented, ids
from tests.support.servers import LiveServer


@pytest.mark.parametrize(("method", "path"), NATIVE, ids=ids(NATIVE))
def test_every_answer_is_documented(shared_server: LiveServer, engine: Engine, method: str, path: str) -> None:
    every_answer_is_documented(shared_server, method, path)
