"""Every log test runs against each store — file, database and S3 (moto's server standing in
for the bucket) — on each database, the way every storage test runs on both databases."""

from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.logs.stores.base import LogStore
from tests.support.logs import store_client


@pytest.fixture
def client(store_name: str, shared_apps: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with store_client(store_name, shared_apps) as client:
        yield client


@pytest.fixture
def store(client: TestClient) -> LogStore:
    """The store the app serves."""
    return client.app.state.log_store
