"""Waiting claims (contract 2.2): a claim with `wait_seconds` is answered as soon as work is
ready — woken by the transaction that made it ready, on every replica — or with an empty list
when its wait ends; a waiter whose client has gone claims nothing. One module per rule:
test_waking (what wakes a claim, and its wait's end), test_fairness (who a wake reaches),
test_hub (the hub's waits and shared claims, on their own), test_gone_clients,
test_heard (what a waiting claim looks at again) and test_replicas.

Each test makes its claims wait generously (far longer than the test needs) and asserts what
the claim answers: a claim that was not woken would answer an empty list."""

import pytest

from app.execution import hub as hubs
from app.main import create_app
from tests.support.api import Operator
from tests.support.servers import LiveServer
from tests.support.settings import app_settings


@pytest.fixture
def live_server(fresh_server):
    """A server of each test's own: these tests assert what its hub of waiting claims heard, woke
    and looked at, which timers and marks left by a shared server's earlier tests would disturb."""
    return fresh_server


@pytest.fixture
def operator(live_server: LiveServer) -> Operator:
    return Operator(live_server.client())


@pytest.fixture
def no_promotion_net(monkeypatch):
    """Claims take the time-driven rails only when told something may be due, not every second
    as well: such a claim would find work (or refuse a stale execution) whatever was heard."""
    monkeypatch.setattr(hubs, "PROMOTION_EVERY_SECONDS", 3600.0)


@pytest.fixture
def replicas(db_url, engine):
    settings = app_settings(db_url)
    with LiveServer(create_app(settings)) as one, LiveServer(create_app(settings)) as two:
        yield one, two

