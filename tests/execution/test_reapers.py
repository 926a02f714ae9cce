"""Reapers (contract 2.6): lost attempts are re-placed on the same try, each mark a
compare-and-swap on the candidate as it was listed. Time is driven by the `now` given to a
sweep, never by sleeping."""

import threading
import uuid
from datetime import datetime, timedelta

import pytest
from sqlmodel import Session

from app.auth.attempt_key import AttemptKey
from app.db.types import utcnow
from app.execution import reapers
from app.orchestration.outcomes import InfraBackoff
from tests.support.api import Worker, assert_stale, task
from tests.support.concurrency import wait_for_lock_waits

THRESHOLDS = reapers.Thresholds(agent_lost=timedelta(seconds=120), dispatch_lost=timedelta(seconds=600))
NO_BACKOFF = InfraBackoff(0)


def sweep(engine, now: datetime) -> dict[str, int]:
    with Session(engine) as session:
        marked = reapers.sweep(session=session, thresholds=THRESHOLDS, backoff=NO_BACKOFF, now=now)
        session.commit()
    return marked


def heartbeat_at(operator, ti_id: str) -> datetime:
    return datetime.fromisoformat(operator.ti(ti_id)["last_heartbeat_at"])


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

    def mark_lost(self, engine, candidate: reapers.Candidate) -> bool:
        with Session(engine) as session:
            marked = reapers.mark_lost(session=session, candidate=candidate, backoff=NO_BACKOFF, now=utcnow())
            session.commit()
        return marked

    def test_candidate_that_reported_running_in_between_is_left_alone(self, operator, engine):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        assert (candidate.reason, candidate.state, candidate.key.attempt_epoch) == ("dispatch_lost", "queued", 1)
        attempt.report("running")
        before = operator.ti(attempt.ti_id)
        assert self.mark_lost(engine, candidate) is False
        assert operator.ti(attempt.ti_id) == before
        attempt.report("success")

    def test_candidate_released_and_claimed_again_in_between_is_left_alone(self, operator, engine):
        """Same state, same try, new epoch: the listed attempt is gone, the new one is not lost."""
        operator.create_run(task("a"))
        worker = Worker(operator)
        first = worker.claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        first.release()
        second = worker.claim_one()
        before = operator.ti(second.ti_id)
        assert (before["state"], before["try_number"], before["attempt_epoch"]) == ("queued", 1, 3)
        assert self.mark_lost(engine, candidate) is False
        assert operator.ti(second.ti_id) == before
        second.report("running")

    def test_candidate_still_as_listed_is_replaced(self, operator, engine):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        (candidate,) = self.candidates(engine, dispatch_lost=timedelta(0))
        assert self.mark_lost(engine, candidate) is True
        assert replaced(operator.ti(attempt.ti_id), "dispatch_lost", 2)
        assert self.mark_lost(engine, candidate) is False


    def test_a_heartbeat_between_list_and_mark_saves_the_attempt(self, operator, engine):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        listed_at = heartbeat_at(operator, attempt.ti_id)
        key = AttemptKey(uuid.UUID(attempt.ti_id), 1, attempt.epoch)
        candidate = reapers.Candidate(key, "running", "agent_lost", silent_before=listed_at + timedelta(microseconds=1))
        assert attempt.heartbeat().status_code == 200
        before = operator.ti(attempt.ti_id)
        assert self.mark_lost(engine, candidate) is False
        assert operator.ti(attempt.ti_id) == before


class TestLockOrder:
    """A sweep holds the run of every attempt it marked until it commits. A settling write on
    another attempt of that run (a report, an observation, an operator's clear) must wait for
    the run before it holds anything the sweep wants next, or PostgreSQL aborts one of them."""

    @pytest.mark.postgres_only("SQLite serialises whole transactions: there is no lock order to get wrong")
    @pytest.mark.parametrize("writer", ["report", "observation", "clear"])
    def test_a_sweep_and_a_writer_waiting_on_its_run_do_not_deadlock(self, writer, operator, engine,
                                                                     live_server):
        operator.create_run(task("a", max_infra_attempts=0), task("b", max_infra_attempts=0))
        a, b = sorted(Worker(operator).claim(2), key=lambda attempt: attempt.task_id)
        a.report("running")
        b.report("running")
        requests = {
            "report": ("/v1/attempts/report", {"state": "success"}, b.headers),
            "observation": ("/v1/observations", {"ti_id": b.ti_id, "try_number": 1, "attempt_epoch": b.epoch,
                                                 "phase": "Failed", "outcome": "unexecutable", "reason": "evicted"},
                            operator.headers),
            "clear": (f"/v1/task-instances/{b.ti_id}/clear", None, operator.headers),
        }
        path, body, headers = requests[writer]
        answers = []

        def write() -> None:
            with live_server.client() as http:
                answers.append(http.post(path, json=body, headers=headers))

        with Session(engine) as session:
            candidates = {str(c.key.ti_id): c for c in reapers.find_candidates(
                session=session, thresholds=reapers.Thresholds(timedelta(0), timedelta(0)),
                now=utcnow() + timedelta(seconds=1))}
            assert reapers.mark_lost(session=session, candidate=candidates[a.ti_id], backoff=NO_BACKOFF, now=utcnow())
            thread = threading.Thread(target=write)
            thread.start()
            wait_for_lock_waits(engine)
            assert reapers.mark_lost(session=session, candidate=candidates[b.ti_id], backoff=NO_BACKOFF, now=utcnow())
            session.commit()
        thread.join(timeout=30)
        assert answers[0].status_code != 503, answers[0].text  # 503: PostgreSQL broke a deadlock
        if writer != "clear":
            assert answers[0].status_code == 409 and answers[0].json()["type"] == "stale-report"
        assert operator.ti(a.ti_id)["state"] == "infra_failed"


    @pytest.mark.postgres_only("SQLite serialises whole transactions: there is no lock order to get wrong")
    def test_promotion_after_the_marks_does_not_deadlock_with_a_clear(self, operator, engine,
                                                                     live_server):
        """sweep() marks first and promotes due retries last, as here: a clear of a due retry
        waits for the run the marks hold, and promotion then skips nothing it waits for."""
        operator.create_run(task("a", max_infra_attempts=0), task("c", retries=1))
        attempts = {x.task_id: x for x in Worker(operator).claim(2)}
        attempts["a"].report("running")
        attempts["c"].report("failed")  # up_for_retry, due at once (retry_delay 0)
        answers = []

        def clear_c() -> None:
            with live_server.client() as http:
                answers.append(operator.on(http).post(f"/v1/task-instances/{attempts['c'].ti_id}/clear"))

        with Session(engine) as session:
            (candidate,) = [c for c in reapers.find_candidates(
                session=session, thresholds=reapers.Thresholds(timedelta(0), timedelta(0)),
                now=utcnow() + timedelta(seconds=1)) if str(c.key.ti_id) == attempts["a"].ti_id]
            assert reapers.mark_lost(session=session, candidate=candidate, backoff=NO_BACKOFF, now=utcnow())
            thread = threading.Thread(target=clear_c)
            thread.start()
            wait_for_lock_waits(engine)
            reapers.promote_eligible(session=session, now=utcnow(), skip_locked=True)
            session.commit()
        thread.join(timeout=30)
        assert answers[0].status_code in (200, 409), answers[0].text


class TestSweep:
    def test_agent_lost_after_the_threshold_is_replaced_on_the_same_try(self, operator, engine):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        attempt.heartbeat()
        beat = heartbeat_at(operator, attempt.ti_id)
        assert sweep(engine, beat + timedelta(seconds=119)) == {}
        assert sweep(engine, beat + timedelta(seconds=121)) == {"agent_lost": 1}
        assert replaced(operator.ti(attempt.ti_id), "agent_lost", 2)
        assert_stale(attempt.heartbeat())
        (record,) = operator.attempts(attempt.ti_id)
        assert (record["outcome_kind"], record["reason"], record["user_code_started"]) == ("infra", "agent_lost", True)

    def test_dispatch_lost_after_the_threshold_is_replaced_on_the_same_try(self, operator, engine):
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        queued = datetime.fromisoformat(operator.ti(attempt.ti_id)["queued_at"])
        assert sweep(engine, queued + timedelta(seconds=599)) == {}
        assert sweep(engine, queued + timedelta(seconds=601)) == {"dispatch_lost": 1}
        assert replaced(operator.ti(attempt.ti_id), "dispatch_lost", 2)
        assert_stale(attempt.send("running"))

    def test_a_replacement_does_not_inherit_the_previous_heartbeat(self, operator, engine):
        operator.create_run(task("a"))
        old_worker = Worker(operator)
        old = old_worker.claim_one()
        old.report("running")
        old_beat = heartbeat_at(operator, old.ti_id)
        new_worker = old_worker.replacement()
        assert operator.reap() == {"worker_lost": 1}
        new = new_worker.claim_one()
        assert operator.ti(new.ti_id)["last_heartbeat_at"] is None
        new.report("running")
        new_beat = heartbeat_at(operator, new.ti_id)
        assert old_beat < new_beat
        # A moment when the old attempt's heartbeat is past the threshold and the new one's is not.
        between = old_beat + (new_beat - old_beat) / 2 + THRESHOLDS.agent_lost
        assert sweep(engine, between) == {}
        ti = operator.ti(new.ti_id)
        assert (ti["state"], ti["attempt_epoch"], ti["infra_attempts"]) == ("running", 3, 1)
        new.report("success")

    def test_worker_lost_replaces_every_in_flight_attempt_of_the_execution(self, operator):
        operator.create_run(*(task(t) for t in ("a", "b", "c", "d")))
        lost, other = Worker(operator, "worker-1"), Worker(operator, "worker-2")
        attempts = lost.claim(3)
        for attempt in attempts[:2]:
            attempt.report("running")
        survivor = other.claim_one()
        lost.replacement()
        assert operator.reap() == {"worker_lost": 3}
        for attempt in attempts:
            assert replaced(operator.ti(attempt.ti_id), "worker_lost", 2)
            assert_stale(attempt.send("success"))
            assert operator.attempts(attempt.ti_id)[0]["reason"] == "worker_lost"
        ti = operator.ti(survivor.ti_id)
        assert (ti["state"], ti["attempt_epoch"], ti["execution_id"]) == ("queued", 1, other.execution_id)
        assert operator.reap() == {}

    def test_an_execution_observed_terminal_loses_its_attempts(self, operator):
        operator.create_run(task("a"))
        worker = Worker(operator)
        attempt = worker.claim_one()
        attempt.report("running")
        observation = {"phase": "Failed", "reason": "Error", "exit_code": 137, "terminal": True,
                       "observed_at": utcnow().isoformat()}
        resp = operator.patch(f"/v1/executions/{worker.execution_id}", json={"observation": observation})
        assert resp.status_code == 200, resp.text
        assert operator.reap() == {"worker_lost": 1}
        assert replaced(operator.ti(attempt.ti_id), "worker_lost", 2)

    def test_due_retries_are_promoted_on_a_new_epoch(self, operator, engine):
        operator.create_run(task("a", retries=1))
        attempt = Worker(operator).claim_one()
        attempt.report("failed")
        assert sweep(engine, utcnow()) == {}
        ti = operator.ti(attempt.ti_id)
        assert (ti["state"], ti["try_number"], ti["attempt_epoch"]) == ("scheduled", 2, 2)
