"""Every test that touches storage runs on SQLite and on PostgreSQL.

The PostgreSQL run creates a fresh database per test session (never the developer's data) and
drops it at the end. The schema is built by the migrations, and tables are emptied between
tests rather than wrapping each test in a transaction, so races get real connections.
"""

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlmodel import Session

from app.db.engine import make_engine
from app.main import create_app
from app.ops.migrate import upgrade
from tests.support.api import Operator
from tests.support.databases import BACKENDS, empty_tables, throwaway_database
from tests.support.logs import STORES
from tests.support.s3 import empty_prefix, moto_s3
from tests.support.servers import LiveServer
from tests.support.settings import TEST_DATA_DIR, app_settings


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
    empty_tables(request.getfixturevalue("engine"))


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


@pytest.fixture(scope="module")
def shared_apps(db_url: str, engine: Engine) -> Callable[..., FastAPI]:
    """The module's apps on one database: one with the test settings plus `overrides` (hashable
    values), built the first time it is asked for. Building an app costs a few tenths of a second
    (FastAPI prepares every route's dependencies), more than most tests take; starting one (a
    TestClient's `with`) costs a few hundredths."""
    apps: dict[tuple[tuple[str, Any], ...], FastAPI] = {}

    def app(**overrides: Any) -> FastAPI:
        key = tuple(sorted(overrides.items()))
        if key not in apps:
            apps[key] = create_app(app_settings(db_url, **overrides))
        return apps[key]

    return app


@pytest.fixture(scope="module")
def shared_app(shared_apps: Callable[..., FastAPI]) -> FastAPI:
    """The module's app with the test settings."""
    return shared_apps()


@pytest.fixture
def client(shared_app: FastAPI) -> Iterator[TestClient]:
    """A TestClient of the module's app, started for this test (its own lifespan, event loop and
    cookies) and stopped after it. A test that changes the app itself (its state, a drain) or
    needs other settings builds its own (make_client)."""
    with TestClient(shared_app) as client:
        yield client


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


@pytest.fixture(params=STORES)
def store_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """FENCELINE_LOG_STORE for a test of every log store. The S3 store's prefix is the module's,
    emptied after each test, so that the module's app of each store serves all its tests."""
    if request.param != "s3":
        yield request.param
        return
    bucket, prefix = request.getfixturevalue("s3_bucket"), request.module.__name__.replace(".", "-")
    yield f"s3://{bucket}/{prefix}"
    empty_prefix(bucket, prefix)


S3_BUCKET = "fenceline-test"


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """A bucket on moto's S3 server (tests.support.s3), which every client of this test session
    (and the servers it starts) is pointed at."""
    import boto3

    with moto_s3():
        boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
        yield S3_BUCKET
