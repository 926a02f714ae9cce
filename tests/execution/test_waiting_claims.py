"""Waiting claims (contract 2.2): a claim with `wait_seconds` is answered as soon as work is
ready — woken by the transaction that made it ready, on every replica — or with an empty list
when its wait ends; a waiter whose client has gone claims nothing.

Each test makes its claims wait generously (far longer than the test needs) and asserts what
the claim answers: a claim that was not woken would answer an empty list."""

import asyncio
import math
import socket
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import create_engine, event, update

from app.db.types import utcnow
from app.execution import claims as claiming
from app.execution import hub as hubs
from app.execution.claims import ClaimTurns
from app.execution.hub import Hub
from app.main import create_app
from app.orchestration.events import CHANNEL, Ready
from app.orchestration.models import TaskInstance
from tests.support.api import Attempt, Operator, Worker, assert_problem, json_of, task
from tests.support.claims import (
    Waiting,
    asleep,
    claim_transactions,
    found_nothing,
    hears,
    hub,
    raw_claim,
    waiting_claims,
)
from tests.support.concurrency import wait_for_lock_waits
from tests.support.servers import LiveServer
from tests.support.settings import app_settings
from tests.support.waiting import wait_until


@pytest.fixture
def live_server(fresh_server):
    """A server of each test's own: these tests assert what its hub of waiting claims heard, woke
    and looked at, which timers and marks left by a shared server's earlier tests would disturb."""
    return fresh_server


@pytest.fixture
def operator(live_server: LiveServer) -> Operator:
    return Operator(live_server.client())


class TestWaitingClaim:
    def test_a_waiting_claim_answers_an_empty_list_when_its_wait_ends(self, live_server, operator):
        assert Waiting(live_server, Worker(operator), wait=0.5).result() == []

    @pytest.mark.parametrize("wait", [-1, 30.5, "soon"])
    def test_a_wait_out_of_range_is_refused_and_claims_nothing(self, live_server, operator, wait):
        operator.create_run(task("t"))
        worker = Worker(operator)
        resp = operator.client.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": wait},
                                    headers=worker.headers)
        assert_problem(resp, 422, "validation-error")
        assert operator.find_ti("t")["state"] == "scheduled"

    def test_ready_work_is_answered_without_waiting(self, live_server, operator):
        operator.create_run(task("t"))
        (item,) = Waiting(live_server, Worker(operator)).result()
        assert item["correlation"]["task_id"] == "t"

    def test_creating_a_run_wakes_a_waiting_claim(self, live_server, operator):
        (waiting,) = waiting_claims(live_server, [Worker(operator)])
        operator.create_run(task("t"))
        (item,) = waiting.result()
        assert (item["correlation"]["task_id"], item["correlation"]["attempt_epoch"]) == ("t", 1)

    def test_an_upstream_success_wakes_a_waiting_claim_for_its_downstream(self, live_server, operator):
        operator.create_run(task("a"), task("b", "a"))
        upstream = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        upstream.report("running")
        upstream.report("success")
        (item,) = waiting.result()
        assert item["correlation"]["task_id"] == "b"

    def test_a_clear_wakes_a_waiting_claim(self, live_server, operator):
        ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
        done = Worker(operator, "worker-a").claim_one()
        done.report("running")
        done.report("success")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        json_of(operator.post(f"/v1/task-instances/{ti_id}/clear"))
        (item,) = waiting.result()
        assert (item["correlation"]["ti_id"], item["correlation"]["try_number"]) == (ti_id, 2)

    def test_clearing_the_failed_of_a_run_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        failed = Worker(operator, "worker-a").claim_one()
        failed.report("running")
        failed.report("failed")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        json_of(operator.post("/v1/runs/dag/run/clear-failed"))
        (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2

    def test_a_release_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        handed_back = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        assert handed_back.release().status_code == 200
        (item,) = waiting.result()
        assert item["correlation"]["attempt_epoch"] == 3  # claim, requeue, claim

    def test_an_infra_re_place_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t"))
        lost = Worker(operator, "worker-a").claim_one()
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        lost.report("unexecutable", reason="dispatch_failed")  # back-off 0 in the tests: ready at once
        (item,) = waiting.result()
        assert item["correlation"]["attempt_epoch"] == 3

    def test_a_retry_delay_passing_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("t", retries=1, retry_delay=1))
        failed = Worker(operator, "worker-a").claim_one()
        failed.report("running")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        failed.report("failed")  # up_for_retry: claimable in a second, told by nothing but the timer
        (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2

    def test_a_reschedule_time_passing_wakes_a_waiting_claim(self, live_server, operator):
        operator.create_run(task("sensor"))
        poke = Worker(operator, "worker-a").claim_one()
        poke.report("running")
        (waiting,) = waiting_claims(live_server, [Worker(operator, "worker-b")])
        poke.report("rescheduled", reschedule_at=(datetime.now(UTC) + timedelta(seconds=1)).isoformat())
        (item,) = waiting.result()
        assert (item["correlation"]["task_id"], item["correlation"]["try_number"]) == ("sensor", 1)

    def test_a_time_already_set_when_the_server_starts_wakes_a_waiting_claim(self, db_url, engine):
        with LiveServer(create_app(app_settings(db_url))) as first:
            operator = Operator(first.client())
            operator.create_run(task("t", retries=1, retry_delay=3))
            failed = Worker(operator, "worker-a").claim_one()
            failed.report("running")
            failed.report("failed")
        with LiveServer(create_app(app_settings(db_url))) as second:  # learns the time from the database
            (waiting,) = waiting_claims(second, [Worker(Operator(second.client()), "worker-b")])
            (item,) = waiting.result()
        assert item["correlation"]["try_number"] == 2


class TestFairness:
    def test_many_waiters_and_one_task_one_gets_it_and_the_others_are_not_woken(self, live_server, operator):
        """The five others stay asleep in the hub (the same waiters, never woken) until there is
        work for them too."""
        hears(live_server)
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(6)])
        waiters = asleep(live_server)
        operator.create_run(task("t"))
        (taker,) = wait_until(lambda: [w for w in waiting if w.future.done()], "a waiter to take the task")
        assert [item["correlation"]["task_id"] for item in taker.result()] == ["t"]
        others = [w for w in waiting if w is not taker]
        assert not any(w.future.done() for w in others)
        assert len(asleep(live_server)) == 5 and set(asleep(live_server)) < set(waiters)
        operator.create_run(*(task(f"u{n}") for n in range(5)), run_id="more")
        answers = [w.result() for w in others]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == [
            f"u{n}" for n in range(5)]

    def test_a_woken_claim_that_takes_a_full_batch_passes_the_wake_on(self, live_server, operator):
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(3)], limit=2)
        operator.create_run(*(task(f"t{n}") for n in range(5)))
        assert sorted(len(w.result()) for w in waiting) == [1, 2, 2]


    @pytest.mark.usefixtures("no_promotion_net")
    def test_waiters_woken_by_one_event_claim_together_in_one_transaction(self, live_server, operator):
        """Each of the four waiters gets one of the run's four tasks, and the four claims are
        one transaction's (ClaimTurns.join): the pools are locked once, not once per waiter; and
        once one waiter's look found the work, the others do not look."""
        waiting = waiting_claims(live_server, [Worker(operator, f"worker-{n}") for n in range(4)])
        with claim_transactions(live_server) as ended:
            operator.create_run(*(task(f"t{n}") for n in range(4)))
            answers = [w.result() for w in waiting]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == ["t0", "t1", "t2", "t3"]
        assert ended == {"commit": [4], "rollback": [], "looks": 1}


    @pytest.mark.usefixtures("no_promotion_net")
    def test_claims_naming_the_same_queues_twice_or_once_claim_together(self, live_server, operator):
        """A batch is one set of queues, however a claim lists them: one transaction, a task each."""
        waiting = [Waiting(live_server, Worker(operator, "worker-0"), queues=["default", "default"])]
        wait_until(lambda: hub(live_server).waiting == 1, "the first claim to wait")
        waiting.append(Waiting(live_server, Worker(operator, "worker-1"), queues=["default"]))
        wait_until(lambda: hub(live_server).waiting == 2, "both claims to wait")
        with claim_transactions(live_server) as ended:
            operator.create_run(task("t0"), task("t1"))
            answers = [w.result() for w in waiting]
        assert sorted(item["correlation"]["task_id"] for items in answers for item in items) == ["t0", "t1"]
        assert ended["commit"] == [2]


def test_asks_made_together_run_once_and_each_is_answered_however_the_run_ends():
    """ClaimTurns.join: the claims of one turn of the event loop run once, answered in order; a run
    that fails answers every claim with its error; a claim given up before its run starts is left
    out of it."""
    async def scenario() -> None:
        turns = ClaimTurns(threads=2)
        runs: list[list[int]] = []

        def run(asks: list[int]) -> list[int]:
            runs.append(list(asks))
            return [ask * 10 for ask in asks]

        def fail(asks: list[int]) -> list[int]:
            raise RuntimeError("the database is away")
        assert await asyncio.gather(*(turns.join("q", run, n) for n in range(3))) == [0, 10, 20]
        assert runs == [[0, 1, 2]]
        failed = await asyncio.gather(*(turns.join("q", fail, n) for n in range(2)), return_exceptions=True)
        assert [repr(error) for error in failed] == [repr(RuntimeError("the database is away"))] * 2
        given_up = asyncio.ensure_future(turns.join("q", run, 1))
        kept = asyncio.ensure_future(turns.join("q", run, 2))
        await asyncio.sleep(0)  # both have asked; their run has not started
        given_up.cancel()
        assert await kept == 20
        assert runs[-1] == [2]
    asyncio.run(scenario())


def test_a_wait_ends_woken_timed_out_or_cancelled_and_a_wake_reaches_only_a_live_waiter():
    """Hub.wait: a wake answers True; a wait that runs out answers False and is not woken
    later; a wait whose request is cancelled takes no wake, which goes to the next waiter."""
    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        try:
            woken = asyncio.ensure_future(hub.wait(5))
            await asyncio.sleep(0)
            hub.wake(1)
            assert await woken is True
            assert await hub.wait(0.01) is False
            assert list(hub._waiters) == []  # an ended wait leaves nothing behind for later wakes to scan
            cancelled = asyncio.ensure_future(hub.wait(5))
            later = asyncio.ensure_future(hub.wait(5))
            await asyncio.sleep(0)
            cancelled.cancel()
            await asyncio.gather(cancelled, return_exceptions=True)
            assert hub.waiting == 1 and len(hub._waiters) == 1
            hub.wake(1)  # the oldest live waiter is the later one
            assert await later is True
            assert hub.waiting == 0
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))  # a wait whose timer never ends it fails, not hangs


def test_claims_made_together_pass_a_wake_on_only_for_announced_work_they_left():
    """Hub.record_claim: claims woken by one event that took, between them, all it announced wake no
    other waiter (it would find nothing); when announced work is left, a full claim passes its
    wake on, once its turn of the event loop is over."""
    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        queues = frozenset({"q"})
        try:
            hub.record_claim(0, False, queues)  # what the start's resynchronisation announced was looked for
            waits = [asyncio.ensure_future(hub.wait(5, queues)) for _ in range(3)]
            await asyncio.sleep(0)
            hub.deliver(Ready(count=2, queue="q"))
            assert hub.waiting == 1  # the two oldest are woken
            for _ in range(2):  # their claims, made together, each took the one it asked for
                hub.record_claim(1, True, queues)
            await asyncio.sleep(0.01)
            assert hub.waiting == 1 and not waits[2].done()

            second = asyncio.ensure_future(hub.wait(5, queues))
            await asyncio.sleep(0)
            hub.deliver(Ready(count=3, queue="q"))  # three tasks for the two waiters: both woken
            assert hub.waiting == 0
            later = asyncio.ensure_future(hub.wait(5, queues))
            await asyncio.sleep(0)
            for _ in range(2):
                hub.record_claim(1, True, queues)
            hub.record_claim(0, False, frozenset({"r"}))  # in the same turn, a claim on other queues finds nothing
            assert hub.waiting == 1  # passed on once the turn is over, not by each claim
            await asyncio.sleep(0.01)
            assert hub.waiting == 0 and later.done() and second.done()  # one task is left: the next waiter looks
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_long_waits_that_end_in_the_same_second_end_together_and_never_late(monkeypatch):
    """An idle fleet's waits run out together (claims.wait_ends): two long waits begun 0.2 s
    apart, whose ends fall in the same second, answer in the same turn of the event loop, on that
    second, neither after its time nor more than a second before it. A short wait keeps its time."""
    monkeypatch.setattr(claiming, "ALIGNED_FROM_SECONDS", 1.0)  # as a 10-30 s wait, in a test's time

    async def nothing() -> tuple[list[int], bool]:
        return [], False

    async def still_there() -> bool:
        return False

    async def scenario() -> None:
        hub = Hub(create_engine("sqlite://"), lambda: None)
        await hub.start()
        loop = asyncio.get_running_loop()
        ended: list[tuple[float, float]] = []

        async def wait(seconds: float) -> None:
            asked = loop.time() + seconds
            items, waited = await claiming.wait_for_work(hub, nothing, limit=1, seconds=seconds, gone=still_there)
            assert items == [] and waited == pytest.approx(loop.time() - (asked - seconds), abs=0.01)  # all waiting
            ended.append((asked, loop.time()))
        try:
            await asyncio.sleep(1.05 - loop.time() % 1)  # just after a whole second: both ends in the next
            first = asyncio.ensure_future(wait(1.2))
            await asyncio.sleep(0.1)
            await asyncio.gather(first, wait(1.2))
            (_, first_end), (_, second_end) = ended
            assert first_end == pytest.approx(second_end, abs=0.005)  # in the same turn
            for asked, end in ended:
                assert math.floor(asked) <= end < min(asked, math.floor(asked) + 0.2)  # on the second before
            asked = loop.time() + 0.5
            await claiming.wait_for_work(hub, nothing, limit=1, seconds=0.5, gone=still_there)
            assert loop.time() >= asked - 0.005  # below ALIGNED_FROM_SECONDS: its own time
        finally:
            await hub.stop()
    asyncio.run(asyncio.wait_for(scenario(), 10))


class TestGoneClient:
    def test_a_waiter_whose_client_has_gone_claims_nothing(self, live_server, operator):
        """The client of the oldest waiting claim closes its connection; a run is then created.
        The gone waiter is woken first, claims nothing and passes the wake on: the task goes to
        the claimer still connected, on the first claim it ever had."""
        gone_worker, live_worker = Worker(operator, "worker-gone"), Worker(operator, "worker-live")
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(gone_worker, b'{"limit": 1, "wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
        (still_there,) = waiting_claims(live_server, [live_worker])  # the older one is still queued
        ti_id = operator.create_run(task("t"))["task_instances"][0]["ti_id"]
        (item,) = still_there.result()
        assert item["correlation"]["ti_id"] == ti_id
        (attempt,) = operator.attempts(ti_id)
        assert (attempt["attempt_epoch"], attempt["execution_id"]) == (1, live_worker.execution_id)

    @pytest.mark.postgres_only("a claim on SQLite takes no row lock to pause it at")
    def test_a_client_gone_while_its_claim_is_made_with_others_is_handed_nothing(self, live_server, operator,
                                                                                   engine):
        """Two waiters woken together claim in one transaction, which a test transaction
        holding default_pool's row pauses; one client leaves meanwhile. The transaction is
        made again without it: the other gets a task, and the gone one's stays scheduled."""
        # A listener that starts listening only after the claims wait resynchronises, waking the
        # oldest of them on its own: the two would then not be woken, and claim, together.
        wait_until(lambda: hub(live_server).hearing, "the server to hear every event")
        gone_worker, live_worker = Worker(operator, "worker-gone"), Worker(operator, "worker-live")
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(gone_worker, b'{"limit": 1, "wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
            (still_there,) = waiting_claims(live_server, [live_worker])
            with engine.connect() as pause, claim_transactions(live_server) as ended:
                pause.exec_driver_sql("SELECT 1 FROM pools WHERE name = 'default_pool' FOR NO KEY UPDATE")
                operator.create_run(task("t0"), task("t1"))
                wait_for_lock_waits(engine, 1)  # the woken waiters' transaction waits for the pool
                connections = len(live_server.server.server_state.connections)
                raw.close()
                wait_until(lambda: len(live_server.server.server_state.connections) < connections,
                           "the server to see the client go")
                pause.rollback()
                (item,) = still_there.result()  # after the transaction that claimed it committed
            assert (ended["rollback"], ended["commit"]) == ([2], [1])
        others = [ti for ti in operator.run()["task_instances"] if ti["ti_id"] != item["correlation"]["ti_id"]]
        assert [(ti["state"], operator.attempts(ti["ti_id"])) for ti in others] == [("scheduled", [])]
        (attempt,) = operator.attempts(item["correlation"]["ti_id"])
        assert attempt["execution_id"] == live_worker.execution_id

    def test_with_no_other_claimer_the_task_stays_scheduled(self, live_server, operator):
        worker = Worker(operator)
        with socket.create_connection(("127.0.0.1", live_server.port)) as raw:
            raw.sendall(raw_claim(worker, b'{"wait_seconds": 30}'))
            wait_until(lambda: hub(live_server).waiting == 1, "the claim to wait")
        operator.create_run(task("t"))
        # The woken waiter ends its request without claiming: wait for the server's request tasks to end.
        wait_until(live_server.idle, "the gone claim's request to end")
        assert operator.find_ti("t")["state"] == "scheduled"
        assert Worker(operator, "worker-2").claim_one().epoch == 1


@pytest.fixture
def no_promotion_net(monkeypatch):
    """Claims take the time-driven rails only when told something may be due, not every second
    as well: such a claim would find work (or refuse a stale execution) whatever was heard."""
    monkeypatch.setattr(hubs, "PROMOTION_EVERY_SECONDS", 3600.0)


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


@pytest.fixture
def replicas(db_url, engine):
    settings = app_settings(db_url)
    with LiveServer(create_app(settings)) as one, LiveServer(create_app(settings)) as two:
        yield one, two


@pytest.mark.postgres_only("replicas share a PostgreSQL database")
def test_waiting_claimers_on_two_replicas_receive_each_new_task_exactly_once(replicas):
    """16 claimers, half on each replica, claim with waits until every task of four runs,
    created one after another while they wait, is taken."""
    one, two = replicas
    operator = Operator(one.client())
    workers = [Worker(operator, f"worker-{n}") for n in range(16)]
    total, taken, lock = 4 * 10, [], threading.Lock()
    all_taken = threading.Event()

    def claimer(n: int) -> None:
        server = replicas[n % 2]
        with server.client(verify=False) as http:
            while not all_taken.is_set():
                resp = http.post("/v1/dispatch/claim", json={"limit": 2, "wait_seconds": 2},
                                 headers=workers[n].headers)
                for item in json_of(resp)["items"]:
                    Attempt(http, item).report("running")
                    with lock:
                        taken.append(item["correlation"]["ti_id"])
                        if len(taken) >= total:
                            all_taken.set()

    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(claimer, n) for n in range(len(workers))]
        for run in range(4):
            wait_until(lambda: hub(one).waiting + hub(two).waiting >= 8, "claimers waiting on both replicas")
            operator.create_run(*(task(f"t{i}") for i in range(10)), run_id=f"run-{run}")
        all_taken.wait(timeout=120)
        all_taken.set()
        for future in futures:
            future.result(timeout=60)
    assert len(taken) == total and Counter(taken).most_common(1)[0][1] == 1
    assert hub(one).waiting + hub(two).waiting == 0


@pytest.mark.postgres_only("replicas share a PostgreSQL database")
@pytest.mark.usefixtures("no_promotion_net")
def test_a_replica_looks_again_after_hearing_of_another_replicas_writes(replicas):
    """A worker's waiting claims on one replica; the run that makes work ready, and the
    admission that supersedes the worker, go through the other."""
    one, two = replicas
    operator = Operator(two.client())
    worker = Worker(operator)
    found_nothing(one, worker)
    heard = hub(one).generation
    operator.create_run(task("t"))
    wait_until(lambda: hub(one).generation > heard, "replica one to hear of the run")
    (item,) = Waiting(one, worker, wait=3).result()
    assert item["correlation"]["task_id"] == "t"
    found_nothing(one, worker)
    (waiting,) = waiting_claims(one, [worker])
    worker.replacement()
    assert_problem(waiting.response(), 409, "stale-execution")
