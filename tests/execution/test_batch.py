"""Batches (contract 2.11): every entry fenced, validated and answered exactly as its single
request, in order, each whole or not at all; a re-sent batch changes nothing twice."""

import gc
import secrets
import time
import uuid
from typing import Any

import httpx
import jwt
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from app.auth.tokens import KeyRing, Verified, decode, mint, mint_worker
from app.execution.batch import BatchContext, apply
from app.main import create_app
from app.orchestration.outcomes import InfraBackoff
from tests.support.api import Attempt, Operator, Worker, assert_problem, bearer, json_of, task
from tests.support.clusters import database_on
from tests.support.concurrency import race
from tests.support.filesystems import small_filesystem
from tests.support.settings import JWT_SECRET, app_settings

KEYS = KeyRing("k1", {"k1": JWT_SECRET})  # the test app's key ring


def beat(attempt: Attempt) -> dict[str, Any]:
    return {"attempt_token": attempt.token, "op": "heartbeat"}


def said(attempt: Attempt, state: str, **body: Any) -> dict[str, Any]:
    return {"attempt_token": attempt.token, "op": "report", "state": state, **body}


def logged(attempt: Attempt, offset: int, content: str) -> dict[str, Any]:
    return {"attempt_token": attempt.token, "op": "log", "offset": offset, "content": content}


def send(client: Any, worker: Worker, *entries: dict[str, Any]) -> httpx.Response:
    return client.post("/v1/attempts/batch", json={"entries": list(entries)}, headers=worker.headers)


def batch(worker: Worker, *entries: dict[str, Any]) -> list[dict[str, Any]]:
    """The batch's results, one per entry."""
    results = json_of(send(worker.client, worker, *entries))["results"]
    assert len(results) == len(entries)
    return results


def answer(resp: httpx.Response) -> dict[str, Any]:
    """A single request's answer as a batch result."""
    return {"status": resp.status_code, "body": resp.json()}


def running(operator: Operator, count: int) -> tuple[Worker, list[Attempt]]:
    json_of(operator.patch("/v1/pools/default_pool", json={"slots": count + 1}))  # room for every claim
    operator.create_run(*(task(f"t{i:03}", retries=1) for i in range(count)))
    worker = Worker(operator)
    attempts = [a for _ in range(0, count, 100) for a in worker.claim(100)]
    assert len(attempts) == count
    assert [r["status"] for r in batch(worker, *(said(a, "running") for a in attempts))] == [200] * count
    return worker, attempts


class TestBatch:
    def test_heartbeats_reports_and_logs_answer_as_their_single_requests(self, operator):
        worker, (a, b, c) = running(operator, 3)
        results = batch(worker, beat(a), beat(b), said(a, "success"), said(b, "failed", reason="exit 3"),
                        logged(c, 0, "one\n"), beat(c), logged(c, 4, "two\n"))
        assert [r["status"] for r in results] == [200] * 7
        assert results[0]["body"] == {"ti_id": a.ti_id, "state": "running", "try_number": 1, "attempt_epoch": 1,
                                      "should_terminate": False}
        assert results[2]["body"] == answer(a.send("success"))["body"]  # a repeat answers as before
        assert results[3]["body"] == answer(b.send("failed", reason="exit 3"))["body"]
        assert (results[4]["body"], results[6]["body"]) == ({"size": 4}, {"size": 8})
        assert [operator.ti(x.ti_id)["state"] for x in (a, b, c)] == ["success", "up_for_retry", "running"]
        assert operator.log(c.ti_id).endswith("one\ntwo\n")
        assert operator.ti(c.ti_id)["last_heartbeat_at"] is not None

    def test_entries_apply_in_order(self, operator):
        worker, (a,) = running(operator, 1)
        first, then = batch(worker, said(a, "success"), beat(a))
        assert first["status"] == 200
        assert then == answer(a.heartbeat())  # a heartbeat after the outcome: stale, as alone
        assert (then["status"], then["body"]["type"], then["body"]["should_terminate"]) == (409, "stale-report", True)

    def test_stale_entries_among_live_ones_change_nothing(self, operator):
        """The old worker was superseded and its attempt re-placed on the new one: the old
        attempt's entries are stale, whichever the order, and the live one's apply."""
        operator.create_run(task("a"), task("b"))
        old_worker = Worker(operator)
        old, other = old_worker.claim(2)
        batch(old_worker, said(old, "running"), said(other, "running"))
        new_worker = old_worker.replacement()
        assert operator.reap() == {"worker_lost": 2}
        new, _ = new_worker.claim(2)
        if new.ti_id != old.ti_id:
            old, other = other, old
        batch(new_worker, said(new, "running"))
        before = operator.attempts(new.ti_id)
        stale = (beat(old), said(old, "success"), said(old, "running"), logged(old, 0, "late\n"))
        results = batch(old_worker, stale[0], stale[1], stale[2], stale[3])
        for entry, result in zip(stale, results, strict=True):
            assert (result["status"], result["body"]["type"], result["body"]["should_terminate"]) == \
                (409, "stale-report", True), entry
        assert results[0] == answer(old.heartbeat())
        assert results[1] == answer(old.send("success"))
        assert results[3] == answer(old.send_log(0, "late\n"))
        assert operator.attempts(new.ti_id) == before
        live = batch(new_worker, beat(new), said(new, "success"))
        assert [r["status"] for r in live] == [200, 200]
        assert operator.ti(new.ti_id)["state"] == "success"

    def test_heartbeats_stamp_their_own_rows_only(self, operator):
        worker, attempts = running(operator, 4)
        before = {a.ti_id: operator.ti(a.ti_id)["last_heartbeat_at"] for a in attempts}
        time.sleep(0.01)
        assert [r["status"] for r in batch(worker, beat(attempts[1]), beat(attempts[3]))] == [200, 200]
        after = {a.ti_id: operator.ti(a.ti_id)["last_heartbeat_at"] for a in attempts}
        assert [after[a.ti_id] != before[a.ti_id] for a in attempts] == [False, True, False, True]

    def test_an_entry_of_another_execution_is_403_and_the_others_apply(self, operator):
        worker, (a, b) = running(operator, 2)
        stranger = Worker(operator, "worker-2")
        results = batch(stranger, said(a, "success"), beat(b))
        for result in results:
            assert (result["status"], result["body"]["type"]) == (403, "forbidden")
        assert [operator.ti(x.ti_id)["state"] for x in (a, b)] == ["running", "running"]
        assert batch(worker, said(a, "success"))[0]["status"] == 200

    def test_a_resent_batch_changes_nothing_twice(self, operator):
        worker, (a, b, c) = running(operator, 3)
        entries = (said(a, "success"), said(b, "failed", reason="exit 1"), logged(c, 0, "once\n"), beat(c))
        first = batch(worker, *entries)
        tis, records = [operator.ti(x.ti_id) for x in (a, b, c)], [operator.attempts(x.ti_id) for x in (a, b)]
        again = batch(worker, *entries)
        assert [r["status"] for r in again] == [200] * 4
        assert [r["body"] for r in again[:3]] == [r["body"] for r in first[:3]]
        assert [operator.ti(x.ti_id) for x in (a, b)] == tis[:2]
        assert [operator.attempts(x.ti_id) for x in (a, b)] == records
        assert operator.log(c.ti_id).count("once\n") == 1

    def test_a_malformed_entry_is_its_own_422(self, client, operator):
        worker, (a, b) = running(operator, 2)
        bad = (said(a, "finished"), {"op": "report", "state": "success"}, {"attempt_token": a.token, "op": "dance"},
               said(a, "unexecutable", reason="bored"), {**beat(a), "state": "success"},
               {"attempt_token": "not-a-jwt", "op": "heartbeat"}, logged(a, -1, "x"))
        results = batch(worker, *bad[:3], said(b, "success"), *bad[3:])
        assert results[3]["status"] == 200
        refused = results[:3] + results[4:]
        assert [r["status"] for r in refused] == [422, 401, 422, 422, 422, 401, 422]
        assert results[0] == answer(a.send("finished"))  # the single request's very problem
        assert results[4] == answer(a.send("unexecutable", reason="bored"))
        assert results[7] == answer(a.send_log(-1, "x"))
        assert results[6]["body"] == json_of(client.post("/v1/attempts/heartbeat",
                                                         headers={"Authorization": "Bearer not-a-jwt"}), 401)
        assert [operator.ti(x.ti_id)["state"] for x in (a, b)] == ["running", "success"]

    def test_a_traceparent_is_no_field_of_the_body(self, operator):
        """An entry's traceparent is its single request's header: any entry may carry it, a
        heartbeat too, and an invalid one is ignored, as the header is."""
        worker, (a, b) = running(operator, 2)
        header = f"00-{'ab' * 16}-{'cd' * 8}-01"
        results = batch(worker, {**beat(a), "traceparent": header}, {**beat(b), "traceparent": "nonsense"},
                        {**said(a, "success"), "traceparent": header}, {**logged(b, 0, "x\n"), "traceparent": 7})
        assert [r["status"] for r in results] == [200] * 4
        assert [operator.ti(x.ti_id)["state"] for x in (a, b)] == ["success", "running"]

    def test_text_with_a_nul_is_answered_as_its_single_request_alone(self, operator):
        """A log's content may carry NUL (the single append stores it), a report's reason may
        not (its single request's 422): either way the other entries apply."""
        worker, (a, b, c) = running(operator, 3)
        results = batch(worker, logged(a, 0, "x\x00y"), said(b, "failed", reason="exit\x00"), beat(c))
        assert results[0] == {"status": 200, "body": {"size": 3}}
        assert results[1] == answer(b.send("failed", reason="exit\x00"))
        assert results[1]["status"] == 422 and results[2]["status"] == 200
        assert operator.ti(b.ti_id)["state"] == "running"

    def test_an_outcome_for_no_task_instance_is_404_as_alone_and_the_others_apply(self, operator):
        """A token of this execution whose task instance is gone (a database restored from an
        older snapshot): each outcome answers the single request's 404, never the batch's 500."""
        worker, (a,) = running(operator, 1)
        claims = jwt.decode(a.token, options={"verify_signature": False})
        kept = {k: v for k, v in claims.items() if k not in ("iat", "nbf", "exp", "jti", "iss", "aud")}
        gone = Attempt(a.client, {**a.item, "attempt_token": mint(KEYS, {**kept, "sub": str(uuid.uuid4())},
                                                                  ttl_seconds=60)})
        outcomes = [("failed", {}), ("unexecutable", {"reason": "evicted"}), ("success", {}),
                    ("rescheduled", {"reschedule_at": "2030-01-01T00:00:00Z"})]
        results = batch(worker, *(said(gone, state, **body) for state, body in outcomes), beat(a))
        for (state, body), result in zip(outcomes, results, strict=False):
            alone = gone.send(state, **body)
            assert_problem(alone, 404, "task-instance-not-found")
            assert result == answer(alone), state
        assert results[-1]["status"] == 200 and operator.ti(a.ti_id)["state"] == "running"

    def test_a_body_that_is_no_list_of_entries_is_refused_whole(self, client, operator):
        worker, (a,) = running(operator, 1)
        for body in ({"entries": said(a, "success")}, {"entries": [said(a, "success"), 3]}, [said(a, "success")]):
            assert_problem(client.post("/v1/attempts/batch", json=body, headers=worker.headers), 422,
                           "validation-error")
        assert_problem(client.post("/v1/attempts/batch", json={"entries": []}, headers=a.headers), 403, "forbidden")
        assert operator.ti(a.ti_id)["state"] == "running"

    def test_500_entries_apply_and_501_are_refused_whole(self, operator):
        worker, attempts = running(operator, 250)
        results = batch(worker, *(beat(a) for a in attempts), *(said(a, "success") for a in attempts))
        assert [r["status"] for r in results] == [200] * 500
        assert {ti["state"] for ti in operator.run()["task_instances"]} == {"success"}
        operator.create_run(task("late"), run_id="late")
        (late,) = worker.claim(1)
        refused = send(worker.client, worker, *([beat(attempts[0])] * 500), said(late, "running"))
        assert_problem(refused, 413, "batch-too-large")
        assert operator.ti(late.ti_id)["state"] == "queued"


def expiring(attempt: Attempt, seconds: int) -> Attempt:
    """The attempt with a token of the same claims that is refused as expired in `seconds`
    (its exp past the verification's leeway by then)."""
    claims = jwt.decode(attempt.token, options={"verify_signature": False})
    kept = {k: v for k, v in claims.items() if k not in ("iat", "nbf", "exp", "jti", "iss", "aud")}
    now = int(time.time())
    return Attempt(attempt.client, {**attempt.item, "attempt_token": mint(KEYS, kept, ttl_seconds=60,
                                                                          now=now - 90 + seconds)})


class TestBatchTokens:
    """A token verified once is remembered (app/auth/tokens.py Verified), and a remembered token
    is refused in a batch exactly as its single request refuses it."""

    def test_a_token_that_expired_since_its_last_batch_is_401_as_alone(self, operator):
        worker, (a, b) = running(operator, 2)
        soon = expiring(a, 2)
        assert [r["status"] for r in batch(worker, beat(soon), beat(b))] == [200, 200]
        time.sleep(max(0.0, jwt.decode(soon.token, options={"verify_signature": False})["exp"] + 30.2 - time.time()))
        expired, live = batch(worker, beat(soon), beat(b))
        assert expired == answer(soon.heartbeat())
        assert (expired["status"], expired["body"]["type"]) == (401, "unauthorized")
        assert live["status"] == 200

    def test_a_changed_signature_of_a_remembered_token_is_401(self, operator):
        worker, (a,) = running(operator, 1)
        assert batch(worker, beat(a))[0]["status"] == 200
        head, _, signature = a.token.rpartition(".")
        forged = Attempt(a.client, {**a.item, "attempt_token": f"{head}.{signature[::-1]}"})
        (refused,) = batch(worker, beat(forged))
        assert refused == answer(forged.heartbeat())
        assert refused["status"] == 401

    def test_a_key_no_longer_accepted_is_401_though_its_tokens_were_remembered(self, operator, make_client):
        worker, (a,) = running(operator, 1)
        assert batch(worker, beat(a))[0]["status"] == 200
        rotated = make_client(jwt_kid="k2", jwt_secret="a-newer-jwt-secret-that-is-also-long-enough")
        on_rotated = Operator(rotated)
        newer = KeyRing("k2", {"k2": "a-newer-jwt-secret-that-is-also-long-enough"})
        same_worker = bearer(mint_worker(newer, uuid.UUID(worker.execution_id), worker.seat, ttl_seconds=600))
        (refused,) = json_of(rotated.post("/v1/attempts/batch", headers=same_worker,
                                          json={"entries": [beat(a)]}))["results"]
        assert refused == answer(a.on(rotated).heartbeat())
        assert refused["status"] == 401
        assert on_rotated.ti(a.ti_id)["state"] == "running"

    def test_more_tokens_than_the_bound_keep_the_newest(self, monkeypatch):
        monkeypatch.setattr(Verified, "MAX_ENTRIES", 2)
        keyring = KeyRing("k1", {"k1": JWT_SECRET})
        tokens = [mint(keyring, {"sub": f"s{n}", "scope": "operator"}, ttl_seconds=60) for n in range(3)]
        for token in tokens:
            decode(keyring, token, scopes=("operator",))
        now = time.time()
        assert [keyring.verified.get(t, now) is not None for t in tokens] == [False, True, True]

    def test_a_remembered_token_is_nothing_the_garbage_collector_walks(self):
        """A fleet's remembered tokens stay out of every full collection: an entry is its
        claims alone, a dict of strings and numbers the collector does not track."""
        keyring = KeyRing("k1", {"k1": JWT_SECRET})
        token = mint(keyring, {"sub": "s", "scope": "operator"}, ttl_seconds=60)
        decode(keyring, token, scopes=("operator",))
        assert keyring.verified.get(token, time.time()) is not None
        assert not any(gc.is_tracked(entry) for entry in keyring.verified._entries.values())


class TestBatchRaces:
    def test_batches_racing_a_clear_and_a_sweep_settle_every_attempt_once(self, live_server, is_postgres):
        """Two workers' batches (heartbeats, then outcomes) race an operator clearing some of
        their task instances and a sweep re-placing the superseded worker's: per attempt,
        exactly one of them ends it, and its record says which; and none deadlocks (each
        takes its runs' locks in run order)."""
        size = 40 if is_postgres else 8
        with live_server.client() as client:
            operator = Operator(client)
            json_of(operator.patch("/v1/pools/default_pool", json={"slots": 2 * size}))
            for run in range(8):  # several runs, so batches and the sweep lock several each
                operator.create_run(*(task(f"t{i:03}") for i in range(2 * size // 8)), run_id=f"run-{run}")
            kept, lost = Worker(operator, "worker-1"), Worker(operator, "worker-2")
            mine = {w.execution_id: w.claim(size) for w in (kept, lost)}
            for worker in (kept, lost):
                batch(worker, *(said(a, "running") for a in mine[worker.execution_id]))
            lost.replacement()  # the sweep re-places worker-2's attempts as worker_lost
        every = [a for attempts in mine.values() for a in attempts]
        cleared = every[::5]

        def sender(worker: Worker):
            attempts = mine[worker.execution_id]
            return lambda http: http.post("/v1/attempts/batch", headers=worker.headers, json={"entries": [
                *(beat(a) for a in attempts), *(said(a, "success") for a in attempts)]})

        def clearer(http: httpx.Client) -> list[httpx.Response]:
            return [operator.on(http).post(f"/v1/task-instances/{a.ti_id}/clear") for a in cleared]

        def reaper(http: httpx.Client) -> httpx.Response:
            return operator.on(http).post("/v1/admin/reap")

        kept_answer, lost_answer, clears, reaped = race(live_server, [sender(kept), sender(lost), clearer, reaper])
        results = {}
        for worker, resp in ((kept, kept_answer), (lost, lost_answer)):
            outcomes = json_of(resp)["results"][size:]
            results.update({a.ti_id: r for a, r in zip(mine[worker.execution_id], outcomes, strict=True)})
        # A clear that read the task instance before a batch or the sweep moved it loses its race.
        assert {(r.status_code, r.json().get("type")) for r in clears} <= {(200, None), (409, "task-instance-moved")}
        clear_won = {a.ti_id for a, r in zip(cleared, clears, strict=True) if r.status_code == 200}
        marked = json_of(reaped)["marked"].get("worker_lost", 0)
        with live_server.client() as client:
            ended = {a.ti_id: Operator(client).attempts(a.ti_id)[0] for a in every}
        by = {"success": 0, "unexecutable": 0, "cleared": 0}
        for attempt in every:
            record, result = ended[attempt.ti_id], results[attempt.ti_id]
            assert (record["try_number"], record["attempt_epoch"]) == (1, 1)
            by[record["state"]] += 1
            assert (result["status"] == 200) == (record["state"] == "success"), (record, result)
            if result["status"] != 200:
                assert (result["status"], result["body"]["type"]) == (409, "stale-report"), result
            if record["state"] == "unexecutable":
                assert attempt in mine[lost.execution_id] and record["reason"] == "worker_lost"
            if record["state"] == "cleared":
                assert attempt.ti_id in clear_won
        assert by["unexecutable"] == marked
        assert sum(by.values()) == len(every)


class TestBatchFaults:
    def test_a_full_database_met_by_a_log_append_fails_the_batch_whole(self, db_url):
        """A log append's chunk is its one write, made without a savepoint: when the database
        refuses it, the batch's transaction can write nothing more, so the batch is answered
        507 whole and nothing of it is applied (the worker then sends each entry alone)."""
        backend = "postgresql" if db_url.startswith("postgresql") else "sqlite"
        with small_filesystem("4m") as mount, database_on(mount, backend) as url, \
                TestClient(create_app(app_settings(url, log_store="database"))) as client:
            operator = Operator(client)
            operator.create_run(task("a"), task("b"))
            worker = Worker(operator)
            a, b = worker.claim(2)
            a.report("running")
            offset, chunk = 0, secrets.token_urlsafe(192 * 1024)  # 256 KiB no database compresses
            while (alone := a.send_log(offset, chunk)).status_code == 200:
                offset += len(chunk)
                assert offset < 8 * 1024 * 1024, "the file system never filled"
            # Where the database says so: PostgreSQL at the chunk's insert, SQLite at the commit.
            full = "log-store-full" if backend == "postgresql" else "database-full"
            assert_problem(alone, 507, full)
            assert_problem(send(client, worker, said(b, "running"), logged(a, offset, chunk)), 507, full)
            assert operator.ti(b.ti_id)["state"] == "queued"
            assert len(operator.log(a.ti_id).encode()) - offset < 1024  # only the system line beside it


class TestBatchDurability:
    """A batch of heartbeats alone commits without waiting for the disk (PostgreSQL's
    asynchronous commit); any other entry makes the batch's commit wait as a single request's does."""

    def applied_with(self, engine, worker: Worker, *entries: dict[str, Any]) -> tuple[list[int], str | None]:
        """The entries' statuses, and the batch's synchronous_commit on PostgreSQL as it commits."""
        context = BatchContext(uuid.UUID(worker.execution_id), KEYS, False, InfraBackoff(), refuse_logs)
        with Session(engine) as session:
            results = apply(session=session, context=context, entries=list(entries))
            setting = session.execute(text("SHOW synchronous_commit")).scalar() \
                if engine.dialect.name == "postgresql" else None
            session.commit()
        return [r.status for r in results], setting

    def test_heartbeats_alone_do_not_wait_for_the_disk(self, engine, operator, is_postgres):
        worker, (a, b) = running(operator, 2)
        assert self.applied_with(engine, worker, beat(a), beat(b)) == ([200, 200], "off" if is_postgres else None)
        assert operator.ti(a.ti_id)["last_heartbeat_at"] is not None

    def test_a_report_among_heartbeats_waits_for_the_disk(self, engine, operator, is_postgres):
        worker, (a, b) = running(operator, 2)
        assert self.applied_with(engine, worker, beat(a), said(b, "success")) == \
            ([200, 200], "on" if is_postgres else None)
        assert operator.ti(b.ti_id)["state"] == "success"


def refuse_logs(*_: Any) -> dict[str, Any]:
    raise AssertionError("these batches carry no log entry")
