"""Login throttling (contract 7): failures counted in the database on every password surface,
429 with a doubling Retry-After, a success forgets the username's count.

Time passing is the stored failures moved back, never a sleep; and before a check that must be
throttled, the stored failures are moved HELD seconds ahead, so that however slowly a loaded
machine answers, the wait cannot run out before the check (its Retry-After then counts HELD
seconds more)."""

import base64
from datetime import timedelta

import pytest
from sqlalchemy import update

from app.airflow.v1 import ERRORS_DOC as AIRFLOW_V1_ERRORS
from app.auth.models import LoginFailure
from app.db.types import utcnow
from tests.support.api import ADMIN_PASSWORD, assert_problem


def login(client, password, username="admin", **headers):
    return client.post("/auth/token", json={"username": username, "password": password}, headers=headers)


def basic(username, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()}


def seconds_pass(engine, seconds: float) -> None:
    """Every stored failure happened `seconds` earlier than now."""
    with engine.begin() as conn:
        conn.execute(update(LoginFailure).values(failed_at=utcnow() - timedelta(seconds=seconds)))


HELD = 60


def clock_held(engine) -> None:
    """The stored failures happened HELD seconds from now (see the module's docstring)."""
    seconds_pass(engine, -HELD)


def throttled(resp, wait: int) -> None:
    """429 asking to wait `wait` seconds after the last failure, HELD seconds ahead of now (less
    what the request itself took, under a second)."""
    if resp.request.url.path.startswith("/api/v1"):  # Airflow 2's problem type
        assert_problem(resp, 429, AIRFLOW_V1_ERRORS + "Unknown")
    elif resp.request.url.path == "/auth/token/cli":  # Airflow 3's shape, as airflowctl shows it
        assert resp.status_code == 429 and resp.headers["content-type"] == "application/json"
        assert "detail" in resp.json()
    else:
        assert_problem(resp, 429, "too-many-login-attempts")
    assert HELD + wait - 1 <= int(resp.headers["retry-after"]) <= HELD + wait


SURFACES = {
    "token": lambda client, password: login(client, password),
    "form": lambda client, password: client.post("/auth/token", data={"username": "admin", "password": password}),
    "basic-api-v1": lambda client, password: client.get("/api/v1/dags", headers=basic("admin", password)),
    "basic-metrics": lambda client, password: client.get("/metrics", headers=basic("admin", password)),
    "airflow-cli": lambda client, password: client.post("/auth/token/cli",
                                                        json={"username": "admin", "password": password}),
}


class TestUsername:
    @pytest.mark.parametrize("surface", SURFACES)
    def test_five_failures_then_429_even_for_the_right_password(self, client, engine, surface):
        send = SURFACES[surface]
        for _ in range(5):
            assert send(client, "wrong").status_code == 401
        clock_held(engine)
        throttled(send(client, "wrong"), 1)
        throttled(send(client, ADMIN_PASSWORD), 1)

    def test_the_wait_doubles_to_at_most_a_minute(self, client, engine):
        for _ in range(5):
            login(client, "wrong")
        for expected in (1, 2, 4, 8, 16, 32, 60, 60):
            clock_held(engine)
            throttled(login(client, "wrong"), expected)
            seconds_pass(engine, expected)
            assert login(client, "wrong").status_code == 401

    def test_a_success_forgets_the_usernames_failures(self, client, engine):
        for _ in range(5):
            login(client, "wrong")
        seconds_pass(engine, 1)
        assert login(client, ADMIN_PASSWORD).status_code == 201
        for _ in range(5):
            assert login(client, "wrong").status_code == 401

    def test_failures_older_than_five_minutes_do_not_count(self, client, engine):
        for _ in range(5):
            login(client, "wrong")
        seconds_pass(engine, 301)
        assert login(client, "wrong").status_code == 401

    def test_replicas_share_the_count(self, make_client, engine):
        replicas = [make_client(), make_client()]
        for n in range(5):
            assert login(replicas[n % 2], "wrong").status_code == 401
        clock_held(engine)
        throttled(login(replicas[1], ADMIN_PASSWORD), 1)

    def test_the_dashboard_form_is_throttled_too(self, client, engine):
        for _ in range(5):
            assert client.post("/ui/login", data={"username": "admin", "password": "wrong"}).status_code == 400
        clock_held(engine)
        resp = client.post("/ui/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                           follow_redirects=False)
        wait = int(resp.headers["retry-after"])
        assert resp.status_code == 429 and HELD <= wait <= HELD + 1
        assert f"retry in {wait} s" in resp.text
        throttled(login(client, ADMIN_PASSWORD), 1)


class TestAddress:
    def test_twenty_failures_from_one_address_then_429_for_any_username(self, client, engine):
        for n in range(20):
            assert login(client, "wrong", username=f"user{n}").status_code == 401
        clock_held(engine)
        throttled(login(client, ADMIN_PASSWORD), 1)

    def test_x_forwarded_for_names_the_client_only_behind_a_trusted_proxy(self, make_client, engine):
        direct = make_client()
        for n in range(20):  # spoofing the header changes nothing: the peer is the client
            login(direct, "wrong", username=f"user{n}", **{"X-Forwarded-For": f"10.0.0.{n}"})
        clock_held(engine)
        throttled(login(direct, ADMIN_PASSWORD, **{"X-Forwarded-For": "10.0.1.1"}), 1)

    def test_behind_a_trusted_proxy_each_forwarded_client_counts_alone(self, make_client, engine):
        proxied = make_client(trusted_proxies=["testclient"])  # the test client's peer name
        for n in range(20):
            login(proxied, "wrong", username=f"user{n}", **{"X-Forwarded-For": "10.0.0.1"})
        clock_held(engine)
        throttled(login(proxied, ADMIN_PASSWORD, **{"X-Forwarded-For": "10.0.0.1"}), 1)
        assert login(proxied, ADMIN_PASSWORD, **{"X-Forwarded-For": "10.0.0.2"}).status_code == 201


class TestNoStrangerLocksTheOwnerOut:
    """Issue 30, item 5: the username's count is kept per address, so an attacker sending wrong
    passwords is slowed down at its own addresses while the owner's right password from another
    address is let through."""

    ATTACKER, OWNER = {"X-Forwarded-For": "10.0.0.66"}, {"X-Forwarded-For": "10.0.0.1"}

    @pytest.mark.parametrize("surface", ["token", "basic-api-v1"])
    def test_the_attacker_is_slowed_and_the_owner_let_in(self, make_client, engine, surface):
        proxied = make_client(trusted_proxies=["testclient"])
        for _ in range(5):
            assert login(proxied, "wrong", **self.ATTACKER).status_code == 401
        clock_held(engine)
        throttled(login(proxied, "wrong", **self.ATTACKER), 1)
        throttled(login(proxied, ADMIN_PASSWORD, **self.ATTACKER), 1)
        if surface == "token":
            assert login(proxied, ADMIN_PASSWORD, **self.OWNER).status_code == 201
        else:
            assert proxied.get("/api/v1/dags", headers={**basic("admin", ADMIN_PASSWORD), **self.OWNER}).status_code \
                == 200
        throttled(login(proxied, "wrong", **self.ATTACKER), 1)  # the owner's success forgave the attacker nothing

    def test_an_attacker_at_many_addresses_is_slowed_at_each(self, make_client, engine):
        proxied = make_client(trusted_proxies=["testclient"])
        spread = [{"X-Forwarded-For": f"10.0.1.{n}"} for n in range(4)]
        for headers in spread:
            for _ in range(5):
                assert login(proxied, "wrong", **headers).status_code == 401
        clock_held(engine)
        for headers in spread:
            throttled(login(proxied, "wrong", **headers), 1)
        assert login(proxied, ADMIN_PASSWORD, **self.OWNER).status_code == 201
