"""Every test that touches storage runs on SQLite and on PostgreSQL.

The PostgreSQL run creates a fresh database per test session (never the developer's data) and
drops it at the end. The schema is built by the migrations, and tables are emptied between
tests rather than wrapping each test in a transaction, so races get real connections.
"""

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlmodel import Session

from app.db.engine import make_engine
from app.db.types import metadata
from app.main import create_app
from app.ops.migrate import upgrade
from app.orchestration.routes import DEFAULT_POOL
from app.routing.models import DEFAULT_POOL_SLOTS, Pool
from tests.support.api import Operator
from tests.support.counts import KEPT_COUNTS
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.s3 import moto_s3
from tests.support.servers import LiveServer
from tests.support.settings import TEST_DATA_DIR, app_settings

MIGRATED_DEFAULT_POOL = {"name": DEFAULT_POOL, "slots": DEFAULT_POOL_SLOTS, "description": "Default pool"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """`@pytest.mark.postgres_only(reason)`: the test's SQLite half is skipped, before any of
    its fixtures is set up."""
    for item in items:
        mark = item.get_closest_marker("postgres_only")
        callspec = getattr(item, "callspec", None)
        if mark is not None and callspec is not None and callspec.params.get("db_url") == "sqlite":
            item.add_marker(pytest.mark.skip(reason=mark.args[0] if mark.args else "runs on PostgreSQL only"))


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A throw-away PostgreSQL database for this test session; answers its SQLAlchemy URL."""
    with throwaway_database("postgresql") as url:
        yield url


@pytest.fixture(scope="session", params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The migrated database of one backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'fenceline.db'}"
    else:
        url = request.getfixturevalue("pg_database")
    upgrade(url)
    return url


@pytest.fixture(scope="session")
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def _clean_tables(request: pytest.FixtureRequest) -> Iterator[None]:
    """Empty every table after each storage test, leaving what the migrations seed."""
    yield
    if "engine" not in request.fixturenames:
        return
    shutil.rmtree(TEST_DATA_DIR / "logs", ignore_errors=True)
    engine: Engine = request.getfixturevalue("engine")
    # The kept counts last: deleting task instances appends their deltas (migration 0015).
    tables = sorted(reversed(metadata.sorted_tables), key=lambda t: t.name in KEPT_COUNTS)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            # DELETE, not TRUNCATE: a TRUNCATE of every table makes new files for each (0.2 s a
            # test), a DELETE of a test's few rows takes a millisecond; in one round trip.
            conn.exec_driver_sql("; ".join(f'DELETE FROM "{t.name}"' for t in tables))
        else:
            for table in tables:
                conn.execute(table.delete())
        conn.execute(Pool.__table__.insert().values(**MIGRATED_DEFAULT_POOL))  # what the migration seeds


@pytest.fixture
def is_postgres(db_url: str) -> bool:
    return db_url.startswith("postgresql")


@pytest.fixture
def make_client(db_url: str, engine: Engine) -> Iterator[Callable[..., TestClient]]:
    """Build a TestClient for an app with the test settings plus overrides."""
    clients: list[TestClient] = []

    def make(**overrides: Any) -> TestClient:
        client = TestClient(create_app(app_settings(db_url, **overrides)))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[..., TestClient]) -> TestClient:
    return make_client()


@pytest.fixture
def put(client: TestClient, engine: Engine) -> Callable[..., int]:
    """Append to a stream of `client`'s log store directly, as a replica (or an older version)
    would have; committed. Answers the stream's size."""
    def append(key: str, data: bytes, offset: int = 0) -> int:
        with Session(engine) as session:
            size = client.app.state.log_store.append(key, offset, data, session=session)
            session.commit()
        return size

    return append


@pytest.fixture
def operator(client: TestClient) -> Operator:
    """The operator, logged in on `client`."""
    return Operator(client)


@pytest.fixture(scope="module")
def shared_server(db_url: str, engine: Engine) -> Iterator[LiveServer]:
    """One live server for a module's tests on one database (its tables are still emptied after
    each test)."""
    with LiveServer(create_app(app_settings(db_url))) as server:
        yield server


@pytest.fixture
def live_server(shared_server: LiveServer) -> LiveServer:
    """The module's live server, settled from the test before: no waiting claim of a client
    that has gone, no request in flight. A test that stops, restarts or reconfigures its server
    starts its own (LiveServer, fresh_server)."""
    shared_server.settle()
    return shared_server


@pytest.fixture
def fresh_server(db_url: str, engine: Engine) -> Iterator[LiveServer]:
    """A live server of the test's own, started for it."""
    with LiveServer(create_app(app_settings(db_url))) as server:
        yield server


S3_BUCKET = "fenceline-test"


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """A bucket on moto's S3 server (tests.support.s3), which every client of this test session
    (and the servers it starts) is pointed at."""
    import boto3

    with moto_s3():
        boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
        yield S3_BUCKET
