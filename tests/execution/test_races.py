"""Real races against a live server: threads released together by a barrier, each with its own
HTTP client and database connection. PostgreSQL runs them at full size; SQLite, which
serialises writers, smaller."""

from collections import Counter

import httpx

from tests.support.api import Attempt, Operator, Worker, json_of, task
from tests.support.concurrency import race


def claims_until_empty(headers: dict[str, str], limit: int):
    """A claimer that claims until nothing is left; answers [(ti_id, epoch)] per item."""
    def claimer(http: httpx.Client) -> list[tuple[str, int]]:
        got: list[tuple[str, int]] = []
        while True:
            resp = http.post("/v1/dispatch/claim", json={"limit": limit}, headers=headers)
            assert resp.status_code == 200, resp.text
            items = resp.json()["items"]
            assert len(items) <= limit
            if not items:
                return got
            got += [(i["correlation"]["ti_id"], i["correlation"]["attempt_epoch"]) for i in items]
    return claimer


class TestConcurrentClaims:
    def test_every_ready_task_instance_is_claimed_exactly_once(self, live_server, is_postgres):
        claimers, ready = (32, 200) if is_postgres else (8, 40)
        with live_server.client() as client:
            operator = Operator(client)
            json_of(operator.patch("/v1/pools/default_pool", json={"slots": ready}))  # room for every claim
            operator.create_run(*(task(f"t{i:03}") for i in range(ready)))
            workers = [Worker(operator, f"worker-{n}") for n in range(claimers)]
        results = race(live_server, [claims_until_empty(w.headers, limit=5) for w in workers])
        claimed = [ti_id for got in results for ti_id, _ in got]
        assert len(claimed) == ready
        assert Counter(claimed).most_common(1)[0][1] == 1
        assert {epoch for got in results for _, epoch in got} == {1}
        with live_server.client() as client:
            tis = Operator(client).run()["task_instances"]
        owner = {ti_id: w.execution_id for w, got in zip(workers, results, strict=True) for ti_id, _ in got}
        assert {(ti["state"], ti["attempt_epoch"]) for ti in tis} == {("queued", 1)}
        assert all(ti["execution_id"] == owner[ti["ti_id"]] for ti in tis)


class TestReportVersusReap:
    def test_exactly_one_of_report_and_reap_wins_each_attempt(self, live_server, is_postgres):
        """The attempts' worker was superseded: the reaper re-places them while their agents
        report success. Per attempt, either the report settles it or the reaper re-places it."""
        size = 16 if is_postgres else 6
        with live_server.client() as client:
            operator = Operator(client)
            operator.create_run(*(task(f"t{i:02}") for i in range(size)))
            worker = Worker(operator)
            attempts = worker.claim(size)
            for attempt in attempts:
                attempt.report("running")
            worker.replacement()

        def reporter(attempt: Attempt):
            return lambda http: http.post("/v1/attempts/report", json={"state": "success"}, headers=attempt.headers)

        def reaper(http: httpx.Client) -> httpx.Response:
            return operator.on(http).post("/v1/admin/reap")

        *reports, reaped = race(live_server, [reporter(a) for a in attempts] + [reaper])
        assert reaped.status_code == 200, reaped.text
        with live_server.client() as client:
            final = {ti["ti_id"]: ti for ti in operator.on(client).run()["task_instances"]}
        lost = 0
        for attempt, resp in zip(attempts, reports, strict=True):
            ti = final[attempt.ti_id]
            if resp.status_code == 200:
                assert (ti["state"], ti["attempt_epoch"], ti["infra_attempts"]) == ("success", 1, 0)
            else:
                assert (resp.status_code, resp.json()["type"]) == (409, "stale-report"), resp.text
                assert (ti["state"], ti["attempt_epoch"], ti["last_failure_reason"]) == ("scheduled", 2, "worker_lost")
                lost += 1
        assert reaped.json()["marked"] == ({"worker_lost": lost} if lost else {})
