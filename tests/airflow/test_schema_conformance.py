"""The Airflow API's routes (/api/v1, /api/v2) tell the truth (contract 7): every answer to
schemathesis's valid and invalid requests is a documented status, in a documented media type and
shape, and never a 5xx (tests/support/conformance.py)."""

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from app.main import create_app
from tests.support.conformance import AIRFLOW, every_answer_is_documented, ids
from tests.support.servers import LiveServer
from tests.support.settings import app_settings


@pytest.fixture(scope="module")
def server(db_url: str) -> Iterator[LiveServer]:
    """One real server per database for every operation (each test empties its tables)."""
    with LiveServer(create_app(app_settings(db_url))) as live:
        yield live


@pytest.mark.parametrize(("method", "path"), AIRFLOW, ids=ids(AIRFLOW))
def test_every_answer_is_documented(server: LiveServer, engine: Engine, method: str, path: str) -> None:
    every_answer_is_documented(server, method, path)
