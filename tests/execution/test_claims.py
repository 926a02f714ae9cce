"""Claims (contract 2.2): ready work, a new attempt epoch per dispatch, and who may claim."""

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import Session

from app.db.types import utcnow
from app.execution import reapers
from app.orchestration.models import TaskInstance
from app.orchestration.outcomes import InfraBackoff
from tests.support.api import Worker, assert_problem, assert_stale, task, ti_ids


class TestClaim:
    def test_claim_hands_out_a_work_item_on_epoch_one(self, operator):
        run = operator.create_run({**task("a"), "map_index": 4, "payload": {"command": ["run"], "env": {"A": "1"}}})
        worker = Worker(operator)
        resp = worker.claim_response(5)
        (item,) = resp.json()["items"]
        assert item["payload"] == {"command": ["run"], "args": [], "env": {"A": "1"}}
        assert item["correlation"] == {
            "ti_id": ti_ids(run)["a"], "dag_id": "dag", "run_id": "run", "task_id": "a", "map_index": 4,
            "try_number": 1, "attempt_epoch": 1, "tenant_id": None, "trace_id": run["trace_id"]}
        ti = operator.ti(ti_ids(run)["a"])
        assert (ti["state"], ti["attempt_epoch"], ti["execution_id"], ti["last_heartbeat_at"]) == (
            "queued", 1, worker.execution_id, None)

    def test_claim_takes_at_most_the_limit_and_never_twice(self, operator):
        operator.create_run(*(task(f"t{i}") for i in range(5)))
        worker = Worker(operator)
        first, second = worker.claim(3), worker.claim(3)
        assert (len(first), len(second)) == (3, 2)
        assert len({a.ti_id for a in first + second}) == 5
        assert worker.claim() == []

    def test_superseded_execution_claims_nothing(self, operator):
        run = operator.create_run(task("a"))
        old = Worker(operator)
        old.replacement()
        problem = assert_problem(old.claim_response(), 409, "stale-execution")
        assert problem["should_terminate"] is True
        ti = operator.ti(ti_ids(run)["a"])
        assert (ti["state"], ti["attempt_epoch"]) == ("scheduled", 0)

    @pytest.mark.parametrize("left", [0, 1], ids=["nothing left", "work left"])
    def test_right_after_a_full_claim_a_superseded_execution_still_claims_nothing(self, operator, left):
        """A claim that took all it asked for spares the next claim on its queues the first
        look: that claim must still refuse a superseded execution, and leave the work there."""
        operator.create_run(*(task(f"t{i}") for i in range(1 + left)))
        old = Worker(operator)
        assert len(old.claim(1)) == 1  # full
        new = old.replacement()
        assert_problem(old.claim_response(), 409, "stale-execution")
        assert len(new.claim(5)) == left
        assert new.claim() == []

    def test_a_due_retry_whose_promotion_was_rolled_back_is_promoted_by_the_next_claim(self, operator):
        """The failure makes a retry due at once, so the next claim promotes it first: here that
        claim's execution is stale, its 409 rolls the promotion back, and the claim right after
        it (well inside the once-a-second net) must promote it again."""
        operator.create_run(task("a", retries=1, retry_delay=0))
        old = Worker(operator, "worker-old")
        attempt = old.claim_one()
        attempt.report("running")
        attempt.report("failed")
        old.replacement()
        assert_problem(old.claim_response(), 409, "stale-execution")
        (retry,) = Worker(operator, "worker-new").claim(1)
        assert (retry.task_id, retry.item["correlation"]["try_number"]) == ("a", 2)

    @pytest.mark.parametrize("payload", ["echo hi", ["echo", "hi"]], ids=["string", "list"])
    def test_a_row_whose_payload_is_no_object_does_not_fail_the_claim(self, operator, engine, payload):
        """Issue 30, item 6: one such row (written past the API) once made every claim on its
        queue answer 500; it is handed over as an empty payload, and the rest of the queue is claimed."""
        run = operator.create_run(task("bad"), task("good"))
        with Session(engine) as session:
            session.execute(update(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_ids(run)["bad"]))
                            .values(payload=payload))
            session.commit()
        resp = Worker(operator).claim_response(5)
        assert resp.status_code == 200, resp.text
        items = {item["correlation"]["task_id"]: item["payload"] for item in resp.json()["items"]}
        assert items == {"bad": {"args": [], "env": {}}, "good": {"command": ["true"], "args": [], "env": {}}}

    def test_bad_limit_is_422(self, client, operator):
        worker = Worker(operator)
        for body in ({"limit": 0}, {"limit": 101}, {"limit": 1, "queue": "x"}):
            resp = client.post("/v1/dispatch/claim", json=body, headers=worker.headers)
            assert_problem(resp, 422, "validation-error")


class TestEpochPerDispatch:
    """Two dispatches of one row get different epochs, whatever happened between them."""

    def test_release_then_claim_again(self, operator):
        operator.create_run(task("a"))
        worker = Worker(operator)
        first = worker.claim_one()
        first.release()
        second = worker.claim_one()
        assert (first.epoch, second.epoch) == (1, 3)
        assert_stale(first.send("running"))

    def test_dispatch_lost_then_claim_again(self, operator, engine):
        operator.create_run(task("a"))
        worker = Worker(operator)
        first = worker.claim_one()
        with Session(engine) as session:
            thresholds = reapers.Thresholds(agent_lost=timedelta(minutes=2), dispatch_lost=timedelta(0))
            marked = reapers.sweep(session=session, thresholds=thresholds, backoff=InfraBackoff(0), now=utcnow())
            session.commit()
        assert marked == {"dispatch_lost": 1}
        second = worker.claim_one()
        assert (first.epoch, second.epoch, second.try_number) == (1, 3, 1)
        assert_stale(first.send("running"))

    def test_claim_bumps_the_epoch_even_when_nothing_else_did(self, operator, engine):
        """A row put back to scheduled by hand (no rail, epoch untouched) is still claimed on a
        new epoch, so the first dispatch's token settles nothing."""
        run = operator.create_run(task("a"))
        worker = Worker(operator)
        first = worker.claim_one()
        with engine.begin() as conn:
            conn.execute(update(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_ids(run)["a"]))
                         .values(state="scheduled"))
        second = worker.claim_one()
        assert (first.epoch, second.epoch) == (1, 2)
        assert_stale(first.send("success"))
        second.report("success")
