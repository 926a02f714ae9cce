"""Every log test runs against each store — file, database and S3 (moto's server standing in
for the bucket) — on each database, the way every storage test runs on both databases."""

import uuid
from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.logs.stores.base import LogStore
from tests.support.logs import STORES, store_client


@pytest.fixture(params=STORES)
def store_name(request: pytest.FixtureRequest) -> str:
    """FENCELINE_LOG_STORE for this test; each S3 test gets a prefix of its own."""
    if request.param == "s3":
        return f"s3://{request.getfixturevalue('s3_bucket')}/{uuid.uuid4().hex[:12]}"
    return request.param


@pytest.fixture
def client(store_name: str, make_client: Callable[..., TestClient],
           shared_apps: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with store_client(store_name, make_client, shared_apps) as client:
        yield client


@pytest.fixture
def store(client: TestClient) -> LogStore:
    """The store the app serves."""
    return client.app.state.log_store
