"""A replica's drain (contract 10.3): on SIGTERM `fenceline serve` fails its readiness, answers
its waiting claims (empty) at once, refuses new claims with a 503 a worker repeats, finishes
what is in flight and exits 0."""

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.ops.migrate import upgrade
from tests.support.api import ADMIN_PASSWORD, Operator, Worker, assert_problem
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.releases import database_env
from tests.support.scrape import sample
from tests.support.servers import Served
from tests.support.waiting import wait_until

WAITING = 40


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sigtermed_replica_answers_its_waiting_claims_at_once_and_exits_0(backend, tmp_path):
    with throwaway_database(backend, tmp_path) as url:
        upgrade(url)
        env = {**database_env(url, tmp_path / "data"), "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD}
        server = Served(tmp_path, env, "--workers", "1" if backend == "sqlite" else "2")
        try:
            server.wait_healthy()
            http = httpx.Client(base_url=server.url, timeout=60)
            operator = Operator(http)
            workers = [Worker(operator, f"w{n}") for n in range(WAITING)]

            def claim(worker: Worker) -> tuple[httpx.Response, float]:
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    resp = own.post("/v1/dispatch/claim", json={"limit": 1, "wait_seconds": 25},
                                    headers=worker.headers)
                return resp, time.monotonic()

            with ThreadPoolExecutor(WAITING) as pool:
                answers = [pool.submit(claim, w) for w in workers]
                wait_until(lambda: sample(operator, "fenceline_claims_in_flight") == WAITING,
                           "every claim waiting", timeout=30)
                signalled = time.monotonic()
                server.process.send_signal(signal.SIGTERM)
                done = [a.result() for a in answers]
            assert [(r.status_code, r.json()["items"]) for r, _ in done] == [(200, [])] * WAITING
            # Answered by the drain, not by their 25 s wait running out (bench/upgrade.py measures
            # how soon: 0.07 s for 200); the margin is for a loaded machine.
            assert max(at for _, at in done) - signalled < 10
            assert server.process.wait(timeout=30) == 0
            assert "draining" in server.output
        finally:
            server.stop()


def test_a_draining_replica_is_not_ready_and_starts_no_claim(make_client):
    client = make_client()
    worker = Worker(Operator(client), "w1")
    client.portal.call(client.app.state.drain.begin)  # what SIGTERM begins, on the event loop
    problem = assert_problem(client.get("/health/ready"), 503, "not-ready")
    assert problem["checks"]["serving"].startswith("stopping")
    refused = assert_problem(worker.claim_response(), 503, "draining")
    assert refused["detail"] and worker.claim_response().headers["Retry-After"] == "1"
