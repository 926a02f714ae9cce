"""Attempt tokens (contract 3): real signed JWTs, claim-less (legacy) tokens under the epoch-0
rule, renewal that preserves every claim, and what verification refuses."""

import base64
import json
import time
import uuid
from typing import Any

import jwt
import pytest
from sqlalchemy import update

from app.auth.tokens import KeyRing, mint
from app.orchestration.models import TaskInstance
from tests.support.api import Operator, Worker, assert_problem, assert_stale, bearer, task, ti_ids
from tests.support.scrape import sample
from tests.support.settings import JWT_SECRET
from tests.support.tokens import EPOCH_ABSENT, KEYS, attempt_token, decoded

NEW_SECRET = "a-newer-jwt-secret-that-is-also-long-enough"


def pre_fence_dispatch(operator, engine, **fields: Any) -> tuple[dict[str, Any], Worker]:
    """A task instance queued at epoch 0 on a worker, as a dispatcher from before the fence left it."""
    run = operator.create_run(task("a", **fields))
    worker = Worker(operator)
    with engine.begin() as conn:
        conn.execute(update(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_ids(run)["a"]))
                     .values(state="queued", execution_id=uuid.UUID(worker.execution_id)))
    return operator.ti(ti_ids(run)["a"]), worker


def legacy_tokens(operator) -> float:
    return sample(operator, "agent_legacy_attempt_token_total")


def report(client, token: str, state: str, **body: Any):
    return client.post("/v1/attempts/report", json={"state": state, **body}, headers=bearer(token))


class TestLegacyToken:
    def test_settles_a_pre_fence_attempt_at_epoch_zero(self, client, operator, engine):
        ti, worker = pre_fence_dispatch(operator, engine)
        assert ti["attempt_epoch"] == 0
        token = attempt_token(ti, worker.execution_id)
        assert report(client, token, "running").status_code == 200
        assert client.post("/v1/attempts/heartbeat", headers=bearer(token)).status_code == 200
        resp = report(client, token, "success")
        assert resp.status_code == 200, resp.text
        done = operator.ti(ti["ti_id"])
        assert (done["state"], done["try_number"], done["attempt_epoch"]) == ("success", 1, 0)
        (record,) = operator.attempts(ti["ti_id"])
        assert (record["attempt_epoch"], record["outcome_kind"], record["user_code_started"]) == (0, "success", True)

    def test_cannot_settle_a_claimed_attempt(self, client, operator):
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        claimed = worker.claim_one()
        claimed.report("running")
        ti = operator.ti(ti_ids(run)["a"])
        token = attempt_token(ti, worker.execution_id)
        for state, body in (("running", {}), ("success", {}), ("failed", {}),
                            ("unexecutable", {"reason": "node_lost"})):
            assert_stale(report(client, token, state, **body))
        assert_stale(client.post("/v1/attempts/release", headers=bearer(token)))
        assert operator.ti(ti["ti_id"]) == ti

    def test_heartbeats_for_the_live_attempt_of_its_try(self, client, operator):
        run = operator.create_run(task("a", retries=1))
        worker = Worker(operator)
        worker.claim_one().report("running")
        ti = operator.ti(ti_ids(run)["a"])
        token = attempt_token(ti, worker.execution_id)
        assert ti["attempt_epoch"] == 1
        assert client.post("/v1/attempts/heartbeat", headers=bearer(token)).status_code == 200
        assert client.get("/v1/attempts/live", headers=bearer(token)).status_code == 200
        assert operator.ti(ti["ti_id"])["last_heartbeat_at"] > ti["last_heartbeat_at"]
        other_try = attempt_token(ti, worker.execution_id, try_number=2)
        assert_stale(client.post("/v1/attempts/heartbeat", headers=bearer(other_try)))

    def test_appends_its_log_to_the_trys_legacy_stream_without_being_stopped(self, client, operator):
        """Contract 2.5, 4.1: log appends take the relaxed rule; a claim-less token writes {try}.log."""
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        claimed = worker.claim_one()
        claimed.report("running")
        claimed.append_log(0, "from the claimed agent\n")
        ti = operator.ti(ti_ids(run)["a"])
        token = attempt_token(ti, worker.execution_id)
        resp = client.post("/v1/attempts/logs", json={"offset": 0, "content": "from a legacy agent\n"},
                           headers=bearer(token))
        assert resp.json() == {"size": 20}
        assert b"".join(client.app.state.log_store.read("dag/run/a/-1/1.log")) == b"from a legacy agent\n"
        log = operator.log(ti["ti_id"])
        assert log.index("from a legacy agent") < log.index("from the claimed agent")
        assert_stale(client.post("/v1/attempts/logs", json={"offset": 20, "content": "x"},
                                 headers=bearer(attempt_token(ti, worker.execution_id, try_number=2))))
        assert operator.ti(ti["ti_id"]) == ti

    def test_every_call_is_counted(self, client, operator, engine):
        ti, worker = pre_fence_dispatch(operator, engine)
        token = attempt_token(ti, worker.execution_id)
        before = legacy_tokens(operator)
        report(client, token, "running")
        client.post("/v1/attempts/heartbeat", headers=bearer(token))
        assert legacy_tokens(operator) == before + 2
        with_claim = attempt_token(ti, worker.execution_id, epoch=0)
        assert client.post("/v1/attempts/heartbeat", headers=bearer(with_claim)).status_code == 200
        assert legacy_tokens(operator) == before + 2

    def test_refused_as_401_when_the_setting_says_so(self, make_client, engine):
        client = make_client(accept_legacy_attempt_tokens=False)
        operator = Operator(client)
        ti, worker = pre_fence_dispatch(operator, engine)
        token = attempt_token(ti, worker.execution_id)
        for resp in (report(client, token, "running"), client.post("/v1/attempts/heartbeat", headers=bearer(token)),
                     client.post("/v1/auth/renew", headers=bearer(token))):
            assert_problem(resp, 401, "unauthorized")
        assert operator.ti(ti["ti_id"]) == ti
        assert report(client, attempt_token(ti, worker.execution_id, epoch=0), "running").status_code == 200


class TestRenew:
    @pytest.mark.parametrize("epoch", [EPOCH_ABSENT, 0, 7], ids=["absent", "zero", "n"])
    def test_every_claim_is_preserved_verbatim(self, client, operator, engine, epoch):
        ti, worker = pre_fence_dispatch(operator, engine)
        with engine.begin() as conn:
            conn.execute(update(TaskInstance).where(TaskInstance.id == uuid.UUID(ti["ti_id"]))
                         .values(attempt_epoch=0 if epoch is EPOCH_ABSENT else epoch))
        token = attempt_token(ti, worker.execution_id, epoch, orig_iat=int(time.time()) - 3600)
        resp = client.post("/v1/auth/renew", headers=bearer(token))
        assert resp.status_code == 200, resp.text
        renewed = resp.json()["attempt_token"]
        old, new = decoded(token), decoded(renewed)
        volatile = ("iat", "exp", "jti")
        assert {k: v for k, v in new.items() if k not in volatile} == {
            k: v for k, v in old.items() if k not in volatile}
        assert ("attempt_epoch" in new) is (epoch is not EPOCH_ABSENT)
        assert new["jti"] != old["jti"]
        assert new["exp"] - new["iat"] == 3600
        assert jwt.get_unverified_header(renewed)["kid"] == "k1"
        assert client.post("/v1/attempts/heartbeat", headers=bearer(renewed)).status_code == 200

    def test_a_claimed_work_items_token_renews(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        resp = attempt.renew()
        assert resp.status_code == 200, resp.text
        assert decoded(resp.json()["attempt_token"])["attempt_epoch"] == 1

    def test_a_superseded_epoch_is_not_renewed(self, operator):
        operator.create_run(task("a"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        attempt.release()
        worker.claim_one()
        assert_stale(attempt.renew())

    def test_a_finished_task_instances_token_is_not_renewed(self, operator):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("success")
        assert_stale(attempt.renew())

    def test_past_the_credential_lifetime_is_401(self, client, operator):
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        worker.claim_one()
        ti = operator.ti(ti_ids(run)["a"])
        week = 7 * 24 * 3600
        token = attempt_token(ti, worker.execution_id, 1, orig_iat=int(time.time()) - week - 1)
        assert_problem(client.post("/v1/auth/renew", headers=bearer(token)), 401, "unauthorized")

    def test_renewal_never_outlives_the_credential_lifetime(self, client, operator):
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        worker.claim_one()
        ti = operator.ti(ti_ids(run)["a"])
        orig_iat = int(time.time()) - 7 * 24 * 3600 + 60
        resp = client.post("/v1/auth/renew", headers=bearer(attempt_token(ti, worker.execution_id, 1,
                                                                         orig_iat=orig_iat)))
        assert decoded(resp.json()["attempt_token"])["exp"] == orig_iat + 7 * 24 * 3600


def unsigned(claims: dict[str, Any], header: dict[str, Any]) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part(header)}.{part(claims)}."


class TestVerification:
    @pytest.fixture
    def live(self, operator) -> tuple[dict[str, Any], str]:
        """A claimed attempt's task instance and execution."""
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        worker.claim_one()
        return operator.ti(ti_ids(run)["a"]), worker.execution_id

    def refused(self, client, operator, ti: dict[str, Any], token: str, status: int = 401) -> None:
        for resp in (client.post("/v1/attempts/heartbeat", headers=bearer(token)),
                     report(client, token, "success"), client.post("/v1/auth/renew", headers=bearer(token))):
            assert_problem(resp, status, "unauthorized" if status == 401 else "forbidden")
        assert operator.ti(ti["ti_id"]) == ti

    def test_a_good_token_is_accepted(self, client, live):
        ti, execution_id = live
        assert client.get("/v1/attempts/live", headers=bearer(attempt_token(ti, execution_id, 1))).status_code == 200

    def test_forged_signature_is_401(self, client, operator, live):
        ti, execution_id = live
        forged = attempt_token(ti, execution_id, 1, keyring=KeyRing("k1", {"k1": NEW_SECRET}))
        self.refused(client, operator, ti, forged)

    def test_expired_is_401(self, client, operator, live):
        ti, execution_id = live
        self.refused(client, operator, ti, attempt_token(ti, execution_id, 1, now=int(time.time()) - 700))

    def test_alg_none_is_401(self, client, operator, live):
        ti, execution_id = live
        claims = decoded(attempt_token(ti, execution_id, 1))
        self.refused(client, operator, ti, unsigned(claims, {"alg": "none", "typ": "JWT", "kid": "k1"}))

    def test_another_algorithm_with_the_right_key_is_401(self, client, operator, live):
        ti, execution_id = live
        claims = decoded(attempt_token(ti, execution_id, 1))
        self.refused(client, operator, ti, jwt.encode(claims, JWT_SECRET, algorithm="HS512", headers={"kid": "k1"}))

    def test_unknown_kid_is_401(self, client, operator, live):
        ti, execution_id = live
        unknown = KeyRing("k9", {"k9": JWT_SECRET})
        self.refused(client, operator, ti, attempt_token(ti, execution_id, 1, keyring=unknown))

    def test_missing_attempt_claims_are_401(self, client, operator, live):
        ti, execution_id = live
        claims = decoded(attempt_token(ti, execution_id, 1))
        del claims["try_number"]
        self.refused(client, operator, ti, mint(KEYS, claims, ttl_seconds=600))

    def test_a_worker_token_cannot_report_or_renew(self, client, operator, live):
        ti, _ = live
        worker = Worker(operator, "worker-2")
        self.refused(client, operator, ti, worker.headers["Authorization"].split()[1], status=403)

    def test_an_operator_token_cannot_report(self, client, operator, live):
        ti, _ = live
        self.refused(client, operator, ti, operator.token, status=403)

    def test_an_attempt_token_cannot_call_operator_or_worker_endpoints(self, client, operator, live):
        ti, execution_id = live
        token = bearer(attempt_token(ti, execution_id, 1))
        assert_problem(client.get("/v1/runs", headers=token), 403, "forbidden")
        assert_problem(client.post(f"/v1/task-instances/{ti['ti_id']}/mark", json={"state": "success"},
                                   headers=token), 403, "forbidden")
        assert_problem(client.post("/v1/dispatch/claim", json={"limit": 1}, headers=token), 403, "forbidden")
        assert operator.ti(ti["ti_id"]) == ti


class TestKeyRotation:
    def test_a_token_of_an_older_accepted_key_works_and_renews_with_the_active_key(self, client, operator,
                                                                                 make_client):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()  # signed with k1
        rotated = make_client(jwt_kid="k2", jwt_secret=NEW_SECRET, jwt_accepted_keys={"k1": JWT_SECRET})
        old = attempt.on(rotated)
        assert old.heartbeat().status_code == 200
        resp = old.renew()
        assert resp.status_code == 200, resp.text
        renewed = resp.json()["attempt_token"]
        assert jwt.get_unverified_header(renewed)["kid"] == "k2"
        assert decoded(renewed, NEW_SECRET)["attempt_epoch"] == 1
        assert report(rotated, renewed, "running").status_code == 200
        assert_problem(client.post("/v1/attempts/heartbeat", headers=bearer(renewed)), 401, "unauthorized")

    def test_a_key_no_longer_accepted_is_401(self, operator, make_client):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        rotated = make_client(jwt_kid="k2", jwt_secret=NEW_SECRET)
        assert_problem(attempt.on(rotated).heartbeat(), 401, "unauthorized")
