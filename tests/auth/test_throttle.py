"""Login throttling (contract 7): failures counted in the database on every password surface,
429 with a doubling Retry-After, a success forgets the caller's own count; the username's is
one across every address, and a client that logged in before counts alone.

Time passing is the stored failures moved back, never a sleep; and before a check that must be
throttled, the stored failures are moved HELD seconds ahead, so that however slowly a loaded
machine answers, the wait cannot run out before the check (its Retry-After then counts HELD
seconds more)."""

import base64
from datetime import timedelta

import jwt
import pytest
from sqlalchemy import update

from app.airflow.v1 import ERRORS_DOC as AIRFLOW_V1_ERRORS
from app.auth.deps import DEVICE_COOKIE, DEVICE_HEADER
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


class TestAcrossAddresses:
    """Issue 41, item 3: guesses against one username are bounded across every address together:
    rotating addresses buys an attacker nothing."""

    def test_five_failures_from_five_addresses_then_429_from_a_sixth(self, make_client, engine):
        proxied = make_client(trusted_proxies=["testclient"])
        for n in range(5):
            assert login(proxied, "wrong", **{"X-Forwarded-For": f"10.0.1.{n}"}).status_code == 401
        clock_held(engine)
        throttled(login(proxied, "wrong", **{"X-Forwarded-For": "10.0.2.1"}), 1)
        throttled(login(proxied, ADMIN_PASSWORD, **{"X-Forwarded-For": "2001:db8::1"}), 1)

    def test_every_surface_counts_towards_one_bound(self, make_client, engine):
        proxied = make_client(trusted_proxies=["testclient"])
        for n, surface in enumerate(SURFACES):
            proxied.headers["X-Forwarded-For"] = f"10.0.3.{n}"
            assert SURFACES[surface](proxied, "wrong").status_code == 401
        clock_held(engine)
        proxied.headers["X-Forwarded-For"] = "10.0.3.99"
        throttled(SURFACES["basic-api-v1"](proxied, "wrong"), 1)


def owner(make_client, **settings):
    """A client that logged in as the operator before (it holds the device cookie), and its
    device token as an API client keeps it (the cookie dropped)."""
    client = make_client(**settings)
    resp = login(client, ADMIN_PASSWORD)
    assert resp.status_code == 201 and client.cookies.get(DEVICE_COOKIE) == resp.json()["device_token"]
    return client, resp.json()["device_token"]


class TestTheOwnerIsNeverKeptOut:
    """Issue 41, item 3 (OWASP's device cookies): a client that logged in before is recognised by
    its device token and its own failures alone slow it down, so no stranger keeps it out, from
    anywhere, the owner's own address included."""

    def attack(self, client, engine, addresses=("10.0.0.66",)):
        """Wrong passwords from `addresses`: five for `admin`, then others' until each address
        has twenty, so that the username and every address are throttled for a second."""
        sent = dict.fromkeys(addresses, 0)
        for n in range(5):
            sent[addresses[n % len(addresses)]] += 1
            assert login(client, "wrong", **{"X-Forwarded-For": addresses[n % len(addresses)]}).status_code == 401
        for address, count in sent.items():
            for n in range(count, 20):
                assert login(client, "wrong", username=f"user{n}", **{"X-Forwarded-For": address}).status_code == 401
        clock_held(engine)
        throttled(login(client, ADMIN_PASSWORD, **{"X-Forwarded-For": addresses[0]}), 1)

    @pytest.mark.parametrize("surface", ["token", "airflow-cli", "dashboard"])
    def test_a_stranger_on_the_owners_own_address_does_not_keep_it_out(self, make_client, engine, surface):
        """No proxy, one address: the stranger's failures reach both the username's and the
        address's limits; the owner's cookie still gets it in."""
        device, _ = owner(make_client)
        stranger = make_client()
        for n in range(20):  # the username's limit first, then the address's (other usernames)
            assert login(stranger, "wrong", username="admin" if n < 5 else f"user{n}").status_code == 401
        clock_held(engine)
        throttled(login(stranger, ADMIN_PASSWORD), 1)
        body = {"username": "admin", "password": ADMIN_PASSWORD}
        if surface == "token":
            assert login(device, ADMIN_PASSWORD).status_code == 201
        elif surface == "airflow-cli":
            assert device.post("/auth/token/cli", json=body).status_code == 201
        else:
            assert device.post("/ui/login", data=body, follow_redirects=False).status_code == 303
        clock_held(engine)
        throttled(login(stranger, "wrong"), 1)  # the owner's success forgave the stranger nothing

    def test_an_api_client_sends_its_device_token_as_a_header(self, make_client, engine):
        _, token = owner(make_client, trusted_proxies=["testclient"])
        attacker = make_client(trusted_proxies=["testclient"])
        self.attack(attacker, engine, [f"10.0.1.{n}" for n in range(4)])
        api = make_client(trusted_proxies=["testclient"])
        assert login(api, ADMIN_PASSWORD, **{DEVICE_HEADER: token, "X-Forwarded-For": "10.0.1.0"}).status_code == 201
        basic_call = api.get("/api/v1/dags", headers={**basic("admin", ADMIN_PASSWORD), DEVICE_HEADER: token})
        assert basic_call.status_code == 200

    def test_a_device_is_slowed_by_its_own_failures_alone(self, make_client, engine):
        device, token = owner(make_client)
        other, _ = owner(make_client)
        for _ in range(5):
            assert login(device, "wrong").status_code == 401
        clock_held(engine)
        throttled(login(device, ADMIN_PASSWORD), 1)
        assert login(other, ADMIN_PASSWORD).status_code == 201
        assert login(make_client(), ADMIN_PASSWORD).status_code == 201  # nor did they count for strangers

    def test_a_device_token_recognises_its_username_only_and_opens_nothing(self, make_client, engine):
        _, token = owner(make_client)
        other = make_client()
        for _ in range(5):
            login(other, "wrong", username="someone")
        clock_held(engine)
        throttled(login(other, "wrong", username="someone", **{DEVICE_HEADER: token}), 1)
        assert other.get("/v1/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 403

    def test_a_forged_device_token_is_a_stranger(self, make_client, engine):
        client = make_client()
        self.attack(client, engine)
        claims = {"sub": "admin", "scope": "device", "jti": "x"}
        forged = jwt.encode(claims, "another-key-that-is-long-enough-for-hs256", algorithm="HS256")
        clock_held(engine)
        throttled(login(client, ADMIN_PASSWORD, **{DEVICE_HEADER: forged}), 1)
