"""Who may call what: every bad bearer token is 401, a token of another kind is 403."""

import base64
import json
import time

import jwt
import pytest

from app.auth.tokens import KeyRing, mint
from tests.support.api import ADMIN_PASSWORD, bearer
from tests.support.settings import JWT_SECRET

OPERATOR = {"sub": "admin", "scope": "operator"}
NOW = int(time.time())


def signed(claims=OPERATOR, *, kid="k1", secret=JWT_SECRET, ttl=600, now=None):
    return mint(KeyRing(kid, {kid: secret}), claims, ttl_seconds=ttl, now=now)


def unsigned(alg):
    """A token with the operator's claims that the server's key never signed."""
    claims = {**OPERATOR, "iat": NOW, "exp": NOW + 600, "jti": "j"}
    if alg == "none":
        return jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})
    return jwt.encode(claims, JWT_SECRET, algorithm=alg, headers={"kid": "k1"})


def tampered():
    """A genuine token whose payload was edited after signing."""
    header, _, signature = signed({"sub": "admin", "scope": "worker"}).split(".")
    payload = base64.urlsafe_b64encode(json.dumps(
        {**OPERATOR, "iat": NOW, "exp": NOW + 600, "jti": "j"}).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


def basic(username, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()}


class TestBearer:
    def test_a_valid_operator_token_is_accepted(self, client):
        assert client.get("/v1/occupants", headers=bearer(signed())).status_code == 200

    @pytest.mark.parametrize("headers", [
        {},
        bearer("not-a-token"),
        {"Authorization": "Token abc"},
        bearer(signed(now=NOW - 7200)),
        bearer(unsigned("none")),
        bearer(unsigned("HS512")),
        bearer(signed(kid="k9")),
        bearer(signed(secret="another-secret-that-is-long-enough-for-hs256")),
        bearer(tampered()),
        bearer(jwt.encode({**OPERATOR, "exp": NOW + 600}, JWT_SECRET, algorithm="HS256", headers={"kid": "k1"})),
    ], ids=["missing", "garbage", "other-scheme", "expired", "alg-none", "alg-confusion", "unknown-kid",
            "bad-signature", "tampered", "missing-claims"])
    def test_a_bad_token_is_401(self, client, headers):
        resp = client.get("/v1/occupants", headers=headers)
        assert resp.status_code == 401
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"] == "unauthorized"
        assert resp.headers["www-authenticate"].startswith("Bearer")

    def test_a_worker_token_on_an_operator_endpoint_is_403(self, client, operator):
        worker = operator.admit()["worker_token"]
        resp = client.get("/v1/occupants", headers=bearer(worker))
        assert resp.status_code == 403
        assert resp.json()["type"] == "forbidden"
        assert client.post("/v1/seats/s/executions", headers=bearer(worker), json={}).status_code == 403

    def test_an_older_accepted_key_still_verifies(self, make_client):
        client = make_client(jwt_accepted_keys={"k0": "the-previous-secret-that-is-long-enough"})
        token = signed(kid="k0", secret="the-previous-secret-that-is-long-enough")
        assert client.get("/v1/occupants", headers=bearer(token)).status_code == 200

    def test_open_endpoints_need_no_token(self, client):
        for path in ("/health", "/openapi.json", "/docs"):
            assert client.get(path).status_code == 200, path


class TestBasic:
    def test_accepted_on_metrics(self, client):
        resp = client.get("/metrics", headers=basic("admin", ADMIN_PASSWORD))
        assert resp.status_code == 200
        assert "execution_identity_conflicts" in resp.text

    def test_a_wrong_password_on_metrics_is_401(self, client):
        resp = client.get("/metrics", headers=basic("admin", "wrong"))
        assert resp.status_code == 401
        assert resp.headers["www-authenticate"].startswith("Basic")

    def test_metrics_need_credentials(self, client):
        assert client.get("/metrics").status_code == 401

    def test_not_accepted_on_native_endpoints(self, client):
        assert client.get("/v1/occupants", headers=basic("admin", ADMIN_PASSWORD)).status_code == 401
