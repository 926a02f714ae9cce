"""Every test that touches storage runs on SQLite and on PostgreSQL.

The PostgreSQL run creates a fresh database per test session (never the developer's data) and
drops it at the end. The schema is built by the migrations, and tables are emptied between
tests rather than wrapping each test in a transaction, so races get real connections.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlmodel import Session

from app.config import Settings
from app.db.engine import make_engine
from app.db.types import metadata
from app.main import create_app
from app.ops.migrate import upgrade
from app.orchestration.routes import DEFAULT_POOL
from app.routing.models import DEFAULT_POOL_SLOTS, Pool
from tests.api import ADMIN_PASSWORD, Operator
from tests.databases import BACKENDS, throwaway_database

# Log files and anything else the app keeps on disk go here, never into the working tree.
TEST_DATA_DIR = Path(tempfile.mkdtemp(prefix="fenceline-test-"))
JWT_SECRET = "test-jwt-secret-that-is-long-enough-for-hs256"
MIGRATED_DEFAULT_POOL = {"name": DEFAULT_POOL, "slots": DEFAULT_POOL_SLOTS, "description": "Default pool"}


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
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            names = ", ".join(f'"{t.name}"' for t in metadata.sorted_tables)
            conn.execute(text(f"TRUNCATE {names} CASCADE"))
        else:
            for table in reversed(metadata.sorted_tables):
                conn.execute(table.delete())
        conn.execute(Pool.__table__.insert().values(**MIGRATED_DEFAULT_POOL))  # what the migration seeds


@pytest.fixture
def is_postgres(db_url: str) -> bool:
    return db_url.startswith("postgresql")


def app_settings(db_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": db_url, "admin_password": ADMIN_PASSWORD, "jwt_secret": JWT_SECRET,
        # Tests sweep on demand (POST /v1/admin/reap) and re-place without waiting.
        "reaper_interval_seconds": 0, "infra_backoff_base_seconds": 0, "data_dir": TEST_DATA_DIR, **overrides,
    }
    return Settings(**values)


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """A real uvicorn server on a loopback port, in a thread."""

    def __init__(self, app: FastAPI) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "LiveServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("live server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)


@pytest.fixture
def live_server(db_url: str, engine: Engine) -> Iterator[LiveServer]:
    with LiveServer(create_app(app_settings(db_url))) as server:
        yield server


@pytest.fixture(scope="module")
def live_server_module(db_url: str, engine: Engine) -> Iterator[LiveServer]:
    """One live server for a module's tests (its tables are still emptied after each test)."""
    with LiveServer(create_app(app_settings(db_url))) as server:
        yield server


S3_BUCKET = "fenceline-test"


@pytest.fixture(scope="session")
def s3_bucket() -> Iterator[str]:
    """A bucket on moto's standalone server, the S3-compatible stand-in (this machine has no
    MinIO): a real HTTP endpoint on a loopback port that boto3 talks to as to any bucket. The
    standard AWS_* variables point every client of this test session (and the servers it
    starts) at it."""
    import boto3

    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    variables = {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)
        boto3.client("s3").create_bucket(Bucket=S3_BUCKET)
        yield S3_BUCKET
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        process.terminate()
        process.wait(timeout=20)
