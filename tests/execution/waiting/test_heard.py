"""What a waiting claim looks at again: it spares a look while nothing was heard, and whatever
was heard (or a listener that listens again after its connection was lost) makes it look."""

import time
import uuid
from typing import Any

import pytest
from sqlalchemy import event, update

from app.db.types import utcnow
from app.execution import hub as hubs
from app.orchestration.events import CHANNEL
from app.orchestration.models import TaskInstance
from tests.support.api import Worker, assert_problem, json_of, task
from tests.support.claims import (
    Waiting,
    found_nothing,
    hub,
    waiting_claims,
)
from tests.support.waiting import wait_until


@pytest.mark.usefixtures("no_promotion_net")
class TestWhatWasHeard:
    """A waiting claim whose last look found nothing may spare its next look while nothing was
    heard since (app/execution/hub.py, Hub.may_skip_look). Whatever was heard meanwhile makes it look again."""

    def test_work_made_ready_between_two_waiting_claims_is_found_by_the_second(self, live_server, operator):
        worker = Worker(operator)
        found_nothing(live_server, worker)
        heard = hub(live_server).generation
        operator.create_run(task("t"))
        wait_until(lambda: hub(live_server).generation > heard, "the run's event to be heard")
        (item,) = Waiting(live_server, worker, wait=3).result()  # no event comes while it waits
        assert item["correlation"]["task_id"] == "t"

    def test_a_waiting_claim_told_of_nothing_new_asks_the_database_nothing(self, live_server, operator):
        worker, other = Worker(operator), Worker(operator, "worker-2")
        found_nothing(live_server, worker)
        statements: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            statements.append(statement)
        engine = live_server.app.state.engine
        event.listen(engine, "before_cursor_execute", count)
        try:
            assert Waiting(live_server, worker, wait=0.2).result() == []
            assert statements == []
            assert Waiting(live_server, other, wait=0.2).result() == []  # its first look
            assert [statement for statement in statements if "FROM executions" in statement]
        finally:
            event.remove(engine, "before_cursor_execute", count)

    def test_work_made_ready_unheard_is_found_once_the_quiet_has_run_out(self, live_server, operator, engine,
                                                                          monkeypatch):
        """A rail that made work ready without telling (or an event this process missed) is
        found by the first claim after EMPTY_LOOK_TRUSTED_SECONDS, not only at some later event."""
        monkeypatch.setattr(hubs, "EMPTY_LOOK_TRUSTED_SECONDS", 0.5)
        ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
        Worker(operator, "worker-2").claim_one()
        worker = Worker(operator)
        found_nothing(live_server, worker)
        with engine.begin() as conn:  # back to scheduled, told to nobody
            conn.execute(update(TaskInstance).where(TaskInstance.id == uuid.UUID(ti_id))
                         .values(state="scheduled", execution_id=None))
        time.sleep(0.6)
        (item,) = Waiting(live_server, worker, wait=0.2).result()
        assert item["correlation"]["ti_id"] == ti_id

    @pytest.mark.parametrize("why", ["superseded", "observed terminal"])
    def test_a_waiting_claim_of_an_execution_that_may_no_longer_claim_is_told_to_terminate(
            self, live_server, operator, why):
        worker = Worker(operator)
        found_nothing(live_server, worker)
        (waiting,) = waiting_claims(live_server, [worker])
        if why == "superseded":
            worker.replacement()
        else:
            observation = {"phase": "Failed", "exit_code": 137, "terminal": True, "observed_at": utcnow().isoformat()}
            json_of(operator.patch(f"/v1/executions/{worker.execution_id}", json={"observation": observation}))
        problem = assert_problem(waiting.response(), 409, "stale-execution")
        assert problem["should_terminate"] is True
        # The next claim, waiting or not, is refused too, and the task is not taken.
        operator.create_run(task("t"))
        assert_problem(Waiting(live_server, worker, wait=3).response(), 409, "stale-execution")
        assert operator.find_ti("t")["state"] == "scheduled"


@pytest.mark.postgres_only("SQLite's events do not cross a connection")
def test_a_listener_whose_connection_is_lost_listens_again_and_wakes_waiting_claims(live_server, operator,
                                                                                     engine):
    """The database ends the server's listening connection (as a restart or a failover would):
    the server listens again on a new one, and a run created after that wakes a waiting claim."""
    def listening() -> list[int]:
        with engine.connect() as conn:
            return list(conn.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                f" AND query = 'LISTEN {CHANNEL}'").scalars())

    (lost,) = wait_until(lambda: hub(live_server).hearing and listening(), "the server to listen")
    with engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT pg_terminate_backend({lost})").scalar() is True
    wait_until(lambda: hub(live_server).hearing and listening() not in ([], [lost]), "the server to listen again")
    (waiting,) = waiting_claims(live_server, [Worker(operator)])
    operator.create_run(task("t"))
    (item,) = waiting.result()
    assert item["correlation"]["task_id"] == "t"
