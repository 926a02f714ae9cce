"""An outage of the control plane is nobody's fault (issue 43, item 3; contract 2.6): the
database stopped, or the only server killed, for twice agent_lost_after. Afterwards the
thresholds start again: an attempt whose agent reports again in time keeps its epoch and its
success is accepted, and one that stays silent is agent-lost a threshold after the control
plane came back, not at its first sweep."""

import signal
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.ops.migrate import upgrade
from tests.support.api import ADMIN_PASSWORD, Operator, Worker, task
from tests.support.clusters import own_cluster
from tests.support.databases import throwaway_database
from tests.support.servers import Served, clean_env
from tests.support.settings import app_settings
from tests.support.waiting import wait_until

# agent_lost_after and dispatch_lost_after, seconds: the time the test's own thread has, from the
# control plane's return to a's heartbeat and c's report, on a machine the whole suite loads
# (at 3 s, the likeliest cause of one failure in a full run).
THRESHOLD = 5.0
OUTAGE = 2 * THRESHOLD
LOST_SETTINGS = {"reaper_interval_seconds": 0.2, "agent_lost_after_seconds": THRESHOLD,
                 "dispatch_lost_after_seconds": THRESHOLD}
SWEEPS = "fenceline_reaper_sweep_duration_seconds_count"


def responds(call):
    """`call()`'s response once it is not a 503 (a connection the outage broke is retried)."""
    return wait_until(lambda: (resp := call()).status_code != 503 and resp, "an answer that is not 503")


class Attempts:
    """a and b running and heartbeating, c claimed and not yet running, on one worker."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        operator.create_run(task("a"), task("b"), task("c"))
        self.by_task = {attempt.task_id: attempt for attempt in Worker(operator).claim(3)}
        for name in "ab":
            self.by_task[name].report("running")
            assert self.by_task[name].heartbeat().status_code == 200

    def sweeps(self) -> float | None:
        """The sweeps the server has run (its /metrics), or None while it cannot answer."""
        resp = self.operator.get("/metrics")
        if resp.status_code != 200:
            return None
        return sum(s.value for family in text_string_to_metric_families(resp.text)
                   for s in family.samples if s.name == SWEEPS)

    def after_the_outage(self, back_at: datetime) -> None:
        """Once the control plane has swept twice since it came back (at `back_at`): a
        heartbeats and c reports running, in time; b stays silent."""
        sweeps = wait_until(self.sweeps, "the server to answer")
        wait_until(lambda: (self.sweeps() or 0) >= sweeps + 2, "two sweeps after the outage")
        a, b, c = (self.by_task[name] for name in "abc")
        assert responds(a.heartbeat).status_code == 200, "a's attempt was re-placed by the outage"
        assert responds(lambda: c.send("running")).status_code == 200, "c's attempt was re-placed by the outage"
        assert self.operator.ti(b.ti_id)["state"] == "running"

        def b_lost() -> bool:  # while a and c go on heartbeating
            assert a.heartbeat().status_code == 200 and c.heartbeat().status_code == 200
            return self.operator.ti(b.ti_id)["state"] == "scheduled"

        wait_until(b_lost, "b to be agent-lost", timeout=5 * THRESHOLD)
        [lost] = self.operator.attempts(b.ti_id)
        assert lost["reason"] == "agent_lost"
        assert datetime.fromisoformat(lost["ended_at"]) >= back_at + timedelta(seconds=THRESHOLD)
        for attempt in (a, c):
            assert attempt.report("success")["state"] == "success"
            [record] = self.operator.attempts(attempt.ti_id)
            assert (record["attempt_epoch"], record["outcome_kind"]) == (attempt.epoch, "success")
            ti = self.operator.ti(attempt.ti_id)
            assert (ti["attempt_epoch"], ti["infra_attempts"]) == (attempt.epoch, 0)


class TestControlPlaneOutage:
    def test_a_stopped_database_re_places_no_healthy_attempt(self, db_url):
        if not db_url.startswith("postgresql"):
            pytest.skip("a SQLite file cannot be stopped")
        with own_cluster() as cluster:
            url = cluster.create_database()
            upgrade(url)
            with TestClient(create_app(app_settings(url, **LOST_SETTINGS))) as client:
                attempts = Attempts(Operator(client))
                cluster.stop()
                time.sleep(OUTAGE)  # the outage's length
                back_at = datetime.now(UTC)
                cluster.start()
                attempts.after_the_outage(back_at)

    def test_the_only_server_killed_re_places_no_healthy_attempt(self, is_postgres, tmp_path):
        with throwaway_database("postgresql" if is_postgres else "sqlite", tmp_path) as url:
            upgrade(url)
            env = {**clean_env(tmp_path / "data"), "FENCELINE_ADMIN_PASSWORD": ADMIN_PASSWORD,
                   "FENCELINE_DATABASE_URL": url,
                   **{f"FENCELINE_{k.upper()}": str(v) for k, v in LOST_SETTINGS.items()}}
            server = Served(tmp_path, env, "--no-migrate", "--workers", "1")
            try:
                server.wait_healthy()
                with httpx.Client(base_url=server.url, timeout=60) as http:
                    attempts = Attempts(Operator(http))
                    server.process.send_signal(signal.SIGKILL)
                    server.process.wait(timeout=30)
                    time.sleep(OUTAGE)  # the outage's length
                    back_at = datetime.now(UTC)
                    server = Served(tmp_path, env, "--no-migrate", "--workers", "1", port=server.port)
                    server.wait_healthy()
                    attempts.after_the_outage(back_at)
            finally:
                server.stop()
