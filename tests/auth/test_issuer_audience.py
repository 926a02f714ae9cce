"""Every token names its issuer and its kind's audience (contract 7), and verification requires
them with `nbf`; tokens minted before they did are accepted for a grace period, and counted."""

import time
import uuid
from typing import Any

import jwt
import pytest

from app.auth.tokens import KeyRing, mint
from tests.support.api import Worker, assert_problem, bearer, json_of, task, ti_ids
from tests.support.scrape import sample
from tests.support.settings import JWT_SECRET
from tests.support.tokens import attempt_token, decoded

KEYS = KeyRing("k1", {"k1": JWT_SECRET})
OPERATOR = {"sub": "admin", "scope": "operator"}
WEEK = 7 * 24 * 3600
DROP = object()  # a claim left out


def claims_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def signed(body: dict[str, Any]) -> str:
    """`body` exactly, signed with the server's key."""
    return jwt.encode(body, JWT_SECRET, algorithm="HS256", headers={"kid": "k1"})


def unscoped(claims: dict[str, Any], *, iat: int | None = None, ttl: int = 600) -> str:
    """A token as fenceline minted them before tokens named issuer and audience: no iss, aud, nbf."""
    issued = int(time.time()) if iat is None else iat
    return signed({"iat": issued, "exp": int(time.time()) + ttl, "jti": uuid.uuid4().hex, **claims})


def without_audience(operator, kind: str) -> float:
    return sample(operator, "fenceline_tokens_without_audience_total", kind=kind)


class TestEveryKind:
    def test_names_the_issuer_and_its_own_audience(self, client, operator):
        operator.create_run(task("a"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        attempt.report("running")
        attempt.append_log(0, "line\n")
        cursor = json_of(operator.get("/api/v2/dags/dag/dagRuns/run/taskInstances/a/logs/1"))["continuation_token"]
        minted = {"operator": operator.token, "launcher": operator.launcher_token(),
                  "worker": worker.headers["Authorization"].split()[1], "attempt": attempt.token,
                  "log-cursor": cursor}
        for kind, token in minted.items():
            claims = claims_of(token)
            assert (claims["iss"], claims["aud"], claims["scope"]) == ("fenceline", f"fenceline:{kind}", kind)
            assert claims["nbf"] <= claims["iat"]

    @pytest.mark.parametrize("changes", [
        {"aud": "fenceline:worker"}, {"aud": "somebody-else"}, {"iss": "another-issuer"},
        {"nbf": int(time.time()) + 3600}, {"iss": DROP}, {"aud": DROP},
    ], ids=["another-kinds-audience", "foreign-audience", "foreign-issuer", "not-yet-valid", "audience-only",
            "issuer-only"])
    def test_a_token_off_its_issuer_audience_or_time_is_401(self, client, changes):
        body = {**claims_of(mint(KEYS, OPERATOR, ttl_seconds=600)), **changes}
        token = signed({k: v for k, v in body.items() if v is not DROP})
        assert_problem(client.get("/v1/occupants", headers=bearer(token)), 401, "unauthorized")

    def test_a_small_clock_skew_is_tolerated(self, client):
        token = mint(KEYS, {**OPERATOR, "nbf": int(time.time()) + 10}, ttl_seconds=600)
        assert client.get("/v1/occupants", headers=bearer(token)).status_code == 200


class TestTokensMintedBeforeAudiences:
    def test_are_accepted_within_the_grace_period_and_counted(self, client, operator):
        before = without_audience(operator, "operator")
        assert client.get("/v1/occupants", headers=bearer(unscoped(OPERATOR))).status_code == 200
        assert without_audience(operator, "operator") == before + 1

    def test_are_401_past_the_grace_period(self, client):
        old = unscoped(OPERATOR, iat=int(time.time()) - WEEK - 60)
        assert_problem(client.get("/v1/occupants", headers=bearer(old)), 401, "unauthorized")

    def test_are_401_when_the_setting_allows_no_grace(self, make_client):
        client = make_client(unscoped_token_grace_seconds=0)
        assert_problem(client.get("/v1/occupants", headers=bearer(unscoped(OPERATOR))), 401, "unauthorized")

    def test_renewal_keeps_every_claim_and_names_issuer_and_audience(self, client, operator):
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        worker.claim_one().report("running")
        ti = operator.ti(ti_ids(run)["a"])
        legacy = claims_of(attempt_token(ti, worker.execution_id))  # no attempt_epoch either
        old = unscoped({k: v for k, v in legacy.items() if k not in ("iss", "aud", "nbf", "iat", "exp", "jti")})
        resp = client.post("/v1/auth/renew", headers=bearer(old))
        renewed = decoded(json_of(resp)["attempt_token"])
        volatile = ("iat", "exp", "jti", "iss", "aud", "nbf")
        assert {k: v for k, v in renewed.items() if k not in volatile} == {
            k: v for k, v in claims_of(old).items() if k not in volatile}
        assert "attempt_epoch" not in renewed
        assert (renewed["iss"], renewed["aud"]) == ("fenceline", "fenceline:attempt")
