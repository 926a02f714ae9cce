"""Asymmetric signing (contract 11.3): tokens signed with an Ed25519 or ECDSA P-256 key, whose
public keys /.well-known/jwks.json serves so that a stock JWT library verifies them with no
secret of fenceline's; rotation that keeps old tokens valid; and every refusal of contract 3.5,
algorithm confusion between the HMAC secret and a public key included."""

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from sqlmodel import Session

from app.auth.keys import generate, kid_of, load_private
from app.auth.models import InstallationSecret
from app.auth.tokens import KeyRing, mint
from app.main import create_app
from tests.support.api import Operator, Worker, assert_problem, bearer, task
from tests.support.servers import LiveServer
from tests.support.settings import JWT_SECRET, app_settings
from tests.support.startup import refused, serve

ALGORITHMS = ["EdDSA", "ES256"]


def public_pem(private_pem: str) -> str:
    return load_private(private_pem).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def claimed(client) -> tuple[Operator, Worker, Any]:
    """An operator, a worker and the attempt it claimed, on `client`."""
    operator = Operator(client)
    operator.create_run(task("a"))
    worker = Worker(operator)
    return operator, worker, worker.claim_one()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hmac_signed(claims: dict[str, Any], kid: str, secret: bytes) -> str:
    """An HS256 token made by hand (PyJWT refuses a PEM as an HMAC secret, an attacker does not)."""
    signing_input = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT', 'kid': kid}).encode())}." \
                    f"{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"


@pytest.fixture(params=ALGORITHMS)
def signing(request) -> tuple[str, str]:
    """(algorithm, a private key's PEM) of each asymmetric kind."""
    return request.param, generate(request.param)


class TestJwks:
    def test_a_stock_jwk_client_verifies_attempt_and_worker_tokens(self, db_url, engine, signing):
        algorithm, pem = signing
        with LiveServer(create_app(app_settings(db_url, jwt_signing_key=pem))) as server:
            operator, worker, attempt = claimed(server.client())
            client = jwt.PyJWKClient(f"{server.url}/.well-known/jwks.json")
            for token, audience in ((attempt.token, "fenceline:attempt"),
                                    (worker.headers["Authorization"].split()[1], "fenceline:worker")):
                key = client.get_signing_key_from_jwt(token)
                assert key.key_id == kid_of(load_private(pem)) and key.algorithm_name == algorithm
                claims = jwt.decode(token, key, algorithms=[algorithm], audience=audience, issuer="fenceline")
                assert claims["scope"] == audience.split(":")[1]
            assert jwt.decode(attempt.token, client.get_signing_key_from_jwt(attempt.token), algorithms=[algorithm],
                              audience="fenceline:attempt", issuer="fenceline")["attempt_epoch"] == attempt.epoch

    def test_hs256_stays_the_default_and_serves_no_key(self, client):
        resp = client.get("/.well-known/jwks.json")
        assert resp.json() == {"keys": []} and "max-age" in resp.headers["cache-control"]
        assert jwt.get_unverified_header(Operator(client).token)["alg"] == "HS256"

    def test_the_key_set_is_open_and_holds_no_private_part(self, make_client, signing):
        algorithm, pem = signing
        keys = make_client(jwt_signing_key=pem).get("/.well-known/jwks.json").json()["keys"]
        (key,) = keys
        assert key["alg"] == algorithm and key["use"] == "sig" and "d" not in key


class TestKeySettings:
    def test_a_key_generated_at_first_start_is_kept_for_every_replica(self, make_client, engine, signing):
        algorithm, _ = signing
        first = make_client(jwt_algorithm=algorithm)
        token = Operator(first).token
        assert jwt.get_unverified_header(token)["alg"] == algorithm
        second = make_client(jwt_algorithm=algorithm)
        assert second.get("/v1/runs", headers=bearer(token)).status_code == 200
        assert first.get("/.well-known/jwks.json").json() == second.get("/.well-known/jwks.json").json()
        with Session(engine) as session:
            assert session.get(InstallationSecret, f"jwt_signing_key_{algorithm.lower()}") is not None

    def test_a_key_from_a_file(self, make_client, tmp_path, signing):
        algorithm, pem = signing
        (tmp_path / "key.pem").write_text(pem)
        token = Operator(make_client(jwt_signing_key_file=tmp_path / "key.pem")).token
        assert jwt.get_unverified_header(token) == {"alg": algorithm, "typ": "JWT", "kid": kid_of(load_private(pem))}

    @pytest.mark.parametrize(("env", "says"), [
        ({"FENCELINE_JWT_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----"},
         "FENCELINE_JWT_SIGNING_KEY is not valid"),
        ({"FENCELINE_JWT_SIGNING_KEY_FILE": "/nonexistent/key.pem"}, "FENCELINE_JWT_SIGNING_KEY_FILE"),
        ({"FENCELINE_JWT_ALGORITHM": "RS256"}, "FENCELINE_JWT_ALGORITHM"),
        ({"FENCELINE_JWT_ACCEPTED_PUBLIC_KEYS": '["not a key"]'}, "FENCELINE_JWT_ACCEPTED_PUBLIC_KEYS"),
    ])
    def test_a_bad_key_setting_is_one_line_and_status_2_without_the_key(self, tmp_path, env, says):
        line = refused(serve(tmp_path, **env), 2, says)
        assert "bm90IGEga2V5" not in line

    def test_a_key_of_another_algorithm_than_named_is_refused(self, tmp_path):
        line = refused(serve(tmp_path, FENCELINE_JWT_ALGORITHM="ES256", FENCELINE_JWT_SIGNING_KEY=generate("EdDSA")),
                       2, "FENCELINE_JWT_SIGNING_KEY", "EdDSA")
        assert "PRIVATE" not in line


class TestRotation:
    def test_old_tokens_stay_valid_while_their_key_is_accepted(self, make_client, signing):
        algorithm, old_pem = signing
        new_pem = generate(algorithm)
        operator, _, attempt = claimed(make_client(jwt_signing_key=old_pem))
        rotated = make_client(jwt_signing_key=new_pem, jwt_accepted_public_keys=[public_pem(old_pem)])
        assert {k["kid"] for k in rotated.get("/.well-known/jwks.json").json()["keys"]} == {
            kid_of(load_private(old_pem)), kid_of(load_private(new_pem))}
        old = attempt.on(rotated)
        assert old.heartbeat().status_code == 200
        renewed = old.renew().json()["attempt_token"]
        assert jwt.get_unverified_header(renewed)["kid"] == kid_of(load_private(new_pem))
        assert rotated.get("/v1/runs", headers=operator.headers).status_code == 200
        dropped = make_client(jwt_signing_key=new_pem)
        assert_problem(attempt.on(dropped).heartbeat(), 401, "unauthorized")

    def test_a_generated_key_verifies_on_every_replica_whatever_it_signs_with(self, make_client, signing):
        """A rollout that switches to a generated key: a replica not yet restarted (still HS256)
        accepts the new tokens, and so does one switched on to the other algorithm later."""
        algorithm, _ = signing
        operator, _, attempt = claimed(make_client(jwt_algorithm=algorithm))
        still_hs256 = make_client()
        assert attempt.on(still_hs256).heartbeat().status_code == 200
        assert still_hs256.get("/v1/runs", headers=operator.headers).status_code == 200
        other = next(a for a in ALGORITHMS if a != algorithm)
        assert attempt.on(make_client(jwt_algorithm=other)).heartbeat().status_code == 200

    def test_hs256_tokens_stay_valid_after_moving_to_an_asymmetric_key(self, make_client, signing):
        _, pem = signing
        operator, _, attempt = claimed(make_client())
        moved = make_client(jwt_signing_key=pem)
        assert attempt.on(moved).heartbeat().status_code == 200
        assert jwt.get_unverified_header(Operator(moved).token)["kid"] == kid_of(load_private(pem))


class TestRefusals:
    """Contract 3.5 with an asymmetric key: each forged token is 401 on every agent route, and
    the task instance is left as it was."""

    @pytest.fixture
    def setup(self, make_client, signing):
        algorithm, pem = signing
        client = make_client(jwt_signing_key=pem)
        operator, worker, attempt = claimed(client)
        claims = jwt.decode(attempt.token, options={"verify_signature": False})
        return client, operator, attempt, claims, pem, algorithm

    def refused(self, client, operator, attempt, token: str, status: int = 401) -> None:
        before = operator.ti(attempt.ti_id)
        for resp in (client.post("/v1/attempts/heartbeat", headers=bearer(token)),
                     client.post("/v1/attempts/report", json={"state": "success"}, headers=bearer(token)),
                     client.post("/v1/auth/renew", headers=bearer(token))):
            assert_problem(resp, status, "unauthorized" if status == 401 else "forbidden")
        assert operator.ti(attempt.ti_id) == before

    def test_a_good_token_is_accepted(self, setup):
        client, _, attempt, *_ = setup
        assert client.get("/v1/attempts/live", headers=attempt.headers).status_code == 200

    def test_a_signature_of_another_key_under_the_right_kid(self, setup):
        client, operator, attempt, claims, pem, algorithm = setup
        other = KeyRing(kid_of(load_private(pem)), {kid_of(load_private(pem)): load_private(generate(algorithm))})
        self.refused(client, operator, attempt, mint(other, claims, ttl_seconds=600))

    def test_the_public_key_as_an_hmac_secret(self, setup):
        client, operator, attempt, claims, pem, _ = setup
        kid = kid_of(load_private(pem))
        for secret in (public_pem(pem).encode(), json.dumps(client.get("/.well-known/jwks.json").json()["keys"][0])
                       .encode()):
            self.refused(client, operator, attempt, hmac_signed(claims, kid, secret))

    def test_the_hmac_secret_under_the_public_keys_kid(self, setup):
        client, operator, attempt, claims, pem, _ = setup
        self.refused(client, operator, attempt, hmac_signed(claims, kid_of(load_private(pem)), JWT_SECRET.encode()))

    def test_an_asymmetric_signature_under_the_hmac_kid(self, setup):
        client, operator, attempt, claims, _, algorithm = setup
        self.refused(client, operator, attempt,
                     jwt.encode(claims, load_private(generate(algorithm)), algorithm=algorithm, headers={"kid": "k1"}))

    def test_the_other_asymmetric_algorithm_under_the_kid(self, setup):
        client, operator, attempt, claims, pem, algorithm = setup
        other = "ES256" if algorithm == "EdDSA" else "EdDSA"
        self.refused(client, operator, attempt, jwt.encode(claims, load_private(generate(other)), algorithm=other,
                                                           headers={"kid": kid_of(load_private(pem))}))

    def test_alg_none(self, setup):
        client, operator, attempt, claims, pem, _ = setup
        header = b64(json.dumps({"alg": "none", "typ": "JWT", "kid": kid_of(load_private(pem))}).encode())
        self.refused(client, operator, attempt, f"{header}.{b64(json.dumps(claims).encode())}.")

    def test_an_unknown_kid_and_an_expired_token(self, setup):
        client, operator, attempt, claims, pem, _ = setup
        key = load_private(pem)
        self.refused(client, operator, attempt, mint(KeyRing("k9", {"k9": key}), claims, ttl_seconds=600))
        expired = {**claims, "iat": int(time.time()) - 700, "nbf": int(time.time()) - 700,
                   "exp": int(time.time()) - 100}
        self.refused(client, operator, attempt, mint(KeyRing(kid_of(key), {kid_of(key): key}), expired,
                                                     ttl_seconds=600))

    def test_wrong_scopes(self, setup):
        client, operator, attempt, *_ = setup
        self.refused(client, operator, attempt, Worker(operator, "worker-2").headers["Authorization"].split()[1],
                     status=403)
        self.refused(client, operator, attempt, operator.token, status=403)
        assert_problem(client.get("/v1/runs", headers=attempt.headers), 403, "forbidden")
