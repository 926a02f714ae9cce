"""Reapers (contract 2.6): lost attempts are re-placed on the same try, each mark a
compare-and-swap on the candidate as it was listed. Time is driven by the `now` given to a
sweep, never by sleeping."""

import threading
import time
from datetime import datetime, timedelta

from sqlmodel import Session

from app.db import utcnow
from app.execution import reapers
from app.orchestration.rails import Backoff
from tests.agents import Worker, assert_stale, create_run, reap, read_attempts, read_ti, task

THRESHOLDS = reapers.Thresholds(agent_lost=timedelta(seconds=120), dispatch_lost=timedelta(seconds=600))
NO_BACKOFF = Backoff(0)


def sweep(engine, now: datetime) -> dict[str, int]:
    with Session(engine) as session:
        marked = reapers.sweep(session=session, thresholds=THRESHOLDS, backoff=NO_BACKOFF, now=now)
        session.commit()
    return marked


def heartbeat_at(client, operator, ti_id: str) -> datetime:
    return datetime.fromisoformat(read_ti(client, operator, ti_id)["last_heartbeat_at"])


def replaced(ti: dict, reason: str, epoch: int) -> bool:
    """The task instance is back to scheduled on the same try, one infra attempt spent."""
    return (ti["state"], ti["try_number"], ti["attempt_epoch"], ti["infra_attempts"], ti["last_failure_kind"],
            ti["last_failure_reason"], ti["execution_id"], ti["last_heartbeat_at"]) == (
        "scheduled", 1, epoch, 1, "infra", reason, None, None)


class TestMark:
    def candidates(self, engine, **thresholds: timedelta) -> list[reapers.Candidate]:
        with Session(engine) as session:
            found = reapers.find_candidates(session=session, thresholds=reapers.Thresholds(
                **{"agent_lost": THRESHOLDS.agent_lost, "dispatch_lost": THRESHOLDS.dispatch_lost, **thresholds}),
                now=utcnow())
            session.commit()
        return found

    def mark(self, engine, candidate: reapers.Candidate) -> bool:
        with Session(engine) as session:
            marked = reapers.mark(session=session, candidate=candidate, backoff=NO_BACKOFF, now=utcnow())
            session.commit()
        return marked

    def test_candidate_that_reported_running_in_between_is_left_alone(self, client, operator, engine):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        assert (candidate.reason, candidate.state, candidate.attempt_epoch) == ("dispatch_lost", "queued", 1)
        attempt.report("running")
        before = read_ti(client, operator, attempt.ti_id)
        assert self.mark(engine, candidate) is False
        assert read_ti(client, operator, attempt.ti_id) == before
        attempt.report("success")

    def test_candidate_released_and_claimed_again_in_between_is_left_alone(self, client, operator, engine):
        """Same state, same try, new epoch: the listed attempt is gone, the new one is not lost."""
        create_run(client, operator, task("a"))
        worker = Worker(client, operator)
        first = worker.claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        first.release()
        second = worker.claim_one()
        before = read_ti(client, operator, second.ti_id)
        assert (before["state"], before["try_number"], before["attempt_epoch"]) == ("queued", 1, 3)
        assert self.mark(engine, candidate) is False
        assert read_ti(client, operator, second.ti_id) == before
        second.report("running")

    def test_candidate_still_as_listed_is_replaced(self, client, operator, engine):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        assert self.mark(engine, candidate) is True
        assert replaced(read_ti(client, operator, attempt.ti_id), "dispatch_lost", 2)
        assert self.mark(engine, candidate) is False


    def test_a_heartbeat_between_list_and_mark_saves_the_attempt(self, client, operator, engine):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("running")
        listed_at = heartbeat_at(client, operator, attempt.ti_id)
        candidate = reapers.Candidate(reapers.uuid.UUID(attempt.ti_id), "running", 1, attempt.epoch, "agent_lost",
                                      silent_before=listed_at + timedelta(microseconds=1))
        assert attempt.heartbeat().status_code == 200
        before = read_ti(client, operator, attempt.ti_id)
        assert self.mark(engine, candidate) is False
        assert read_ti(client, operator, attempt.ti_id) == before


class TestLockOrder:
    def test_a_sweep_holding_a_run_and_a_report_waiting_on_it_do_not_deadlock(self, client, operator, engine,
                                                                               live_server, is_postgres):
        """The reaper marks A (locking the run), B's agent reports success (waiting for the run),
        the reaper marks B: B's report must not hold B's row while it waits, so the sweep goes
        through and the late report is stale."""
        if not is_postgres:
            return  # SQLite serialises whole transactions: there is no lock order to get wrong
        create_run(client, operator, task("a", max_infra_attempts=0), task("b", max_infra_attempts=0))
        worker = Worker(client, operator)
        a, b = sorted(worker.claim(2), key=lambda attempt: attempt.task_id)
        a.report("running")
        b.report("running")
        with Session(engine) as session:
            candidates = {c.ti_id: c for c in reapers.find_candidates(
                session=session, thresholds=reapers.Thresholds(timedelta(0), timedelta(0)),
                now=utcnow() + timedelta(seconds=1))}
            assert reapers.mark(session=session, candidate=candidates[reapers.uuid.UUID(a.ti_id)],
                                backoff=NO_BACKOFF, now=utcnow())
            answers = []

            def report_b() -> None:
                with live_server.client() as http:
                    answers.append(http.post("/v1/attempts/report", json={"state": "success"},
                                             headers={"Authorization": f"Bearer {b.token}"}))

            reporter = threading.Thread(target=report_b)
            reporter.start()
            deadline = time.monotonic() + 30
            with engine.connect() as watcher:  # its own connection: activity is snapshotted per transaction
                while not watcher.exec_driver_sql(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").scalar():
                    watcher.rollback()
                    assert time.monotonic() < deadline, "the report never waited on the run"
                    time.sleep(0.01)
            assert reapers.mark(session=session, candidate=candidates[reapers.uuid.UUID(b.ti_id)],
                                backoff=NO_BACKOFF, now=utcnow())
            session.commit()
        reporter.join(timeout=30)
        assert answers[0].status_code == 409 and answers[0].json()["type"] == "stale-report"
        states = {t["task_id"]: t["state"] for t in client.get("/v1/runs/d/r", headers=operator).json()["task_instances"]}
        assert states == {"a": "infra_failed", "b": "infra_failed"}


class TestSweep:
    def test_agent_lost_after_the_threshold_is_replaced_on_the_same_try(self, client, operator, engine):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        attempt.report("running")
        attempt.heartbeat()
        beat = heartbeat_at(client, operator, attempt.ti_id)
        assert sweep(engine, beat + timedelta(seconds=119)) == {}
        assert sweep(engine, beat + timedelta(seconds=121)) == {"agent_lost": 1}
        assert replaced(read_ti(client, operator, attempt.ti_id), "agent_lost", 2)
        assert_stale(attempt.heartbeat())
        (record,) = read_attempts(client, operator, attempt.ti_id)
        assert (record["outcome_kind"], record["reason"], record["user_code_started"]) == ("infra", "agent_lost", True)

    def test_dispatch_lost_after_the_threshold_is_replaced_on_the_same_try(self, client, operator, engine):
        create_run(client, operator, task("a"))
        attempt = Worker(client, operator).claim_one()
        queued = datetime.fromisoformat(read_ti(client, operator, attempt.ti_id)["queued_at"])
        assert sweep(engine, queued + timedelta(seconds=599)) == {}
        assert sweep(engine, queued + timedelta(seconds=601)) == {"dispatch_lost": 1}
        assert replaced(read_ti(client, operator, attempt.ti_id), "dispatch_lost", 2)
        assert_stale(attempt.send("running"))

    def test_a_replacement_does_not_inherit_the_previous_heartbeat(self, client, operator, engine):
        create_run(client, operator, task("a"))
        old_worker = Worker(client, operator)
        old = old_worker.claim_one()
        old.report("running")
        old_beat = heartbeat_at(client, operator, old.ti_id)
        new_worker = old_worker.replacement()
        assert reap(client, operator) == {"worker_lost": 1}
        new = new_worker.claim_one()
        assert read_ti(client, operator, new.ti_id)["last_heartbeat_at"] is None
        new.report("running")
        new_beat = heartbeat_at(client, operator, new.ti_id)
        assert old_beat < new_beat
        # A moment when the old attempt's heartbeat is past the threshold and the new one's is not.
        between = old_beat + (new_beat - old_beat) / 2 + THRESHOLDS.agent_lost
        assert sweep(engine, between) == {}
        ti = read_ti(client, operator, new.ti_id)
        assert (ti["state"], ti["attempt_epoch"], ti["infra_attempts"]) == ("running", 3, 1)
        new.report("success")

    def test_worker_lost_replaces_every_in_flight_attempt_of_the_execution(self, client, operator):
        create_run(client, operator, *(task(t) for t in ("a", "b", "c", "d")))
        lost, other = Worker(client, operator, "worker-1"), Worker(client, operator, "worker-2")
        attempts = lost.claim(3)
        for attempt in attempts[:2]:
            attempt.report("running")
        survivor = other.claim_one()
        lost.replacement()
        assert reap(client, operator) == {"worker_lost": 3}
        for attempt in attempts:
            assert replaced(read_ti(client, operator, attempt.ti_id), "worker_lost", 2)
            assert_stale(attempt.send("success"))
            assert read_attempts(client, operator, attempt.ti_id)[0]["reason"] == "worker_lost"
        ti = read_ti(client, operator, survivor.ti_id)
        assert (ti["state"], ti["attempt_epoch"], ti["execution_id"]) == ("queued", 1, other.execution_id)
        assert reap(client, operator) == {}

    def test_an_execution_observed_terminal_loses_its_attempts(self, client, operator):
        create_run(client, operator, task("a"))
        worker = Worker(client, operator)
        attempt = worker.claim_one()
        attempt.report("running")
        observation = {"phase": "Failed", "reason": "Error", "exit_code": 137, "terminal": True,
                       "observed_at": utcnow().isoformat()}
        resp = client.patch(f"/v1/executions/{worker.execution_id}", json={"observation": observation},
                            headers=operator)
        assert resp.status_code == 200, resp.text
        assert reap(client, operator) == {"worker_lost": 1}
        assert replaced(read_ti(client, operator, attempt.ti_id), "worker_lost", 2)

    def test_due_retries_are_promoted_on_a_new_epoch(self, client, operator, engine):
        create_run(client, operator, task("a", retries=1))
        attempt = Worker(client, operator).claim_one()
        attempt.report("failed")
        assert sweep(engine, utcnow()) == {}
        ti = read_ti(client, operator, attempt.ti_id)
        assert (ti["state"], ti["try_number"], ti["attempt_epoch"]) == ("scheduled", 2, 2)
