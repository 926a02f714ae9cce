"""The log stores every log test runs against (tests/logs/conftest.py): file, database and S3
(moto's server standing in for the bucket)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

STORES = ["file", "database", "s3"]


@contextmanager
def store_client(store_name: str, shared_apps: Callable[..., FastAPI], **overrides: Any) -> Iterator[TestClient]:
    """A client of the module's app of this store and setting overrides (tests/conftest.py,
    shared_apps), started for the test."""
    with TestClient(shared_apps(log_store=store_name, **overrides)) as client:
        yield client
