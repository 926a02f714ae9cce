"""Several API replicas on one PostgreSQL: claims, reports and sweeps stay exactly-once."""

from collections import Counter

import pytest

from app.main import create_app
from tests.support.api import Operator, Worker, bearer, task
from tests.support.concurrency import race
from tests.support.servers import LiveServer
from tests.support.settings import app_settings

pytestmark = pytest.mark.postgres_only("replicas share a PostgreSQL database")


@pytest.fixture
def replicas(db_url, engine):
    settings = app_settings(db_url, dispatch_lost_after_seconds=0)
    with LiveServer(create_app(settings)) as one, LiveServer(create_app(settings)) as two:
        yield one, two


class _Both:
    """Hands out the two replicas in turn, as a load balancer would."""

    def __init__(self, servers):
        self.servers, self.n = servers, 0

    def client(self, **kwargs):
        self.n += 1
        return self.servers[self.n % 2].client(**kwargs)


def test_claimers_on_two_replicas_take_every_task_instance_once(replicas):
    one, _ = replicas
    with one.client() as http:
        operator = Operator(http)
        operator.create_run(*(task(f"t{i:02}") for i in range(60)))
        workers = [Worker(operator, f"worker-{n}") for n in range(8)]

    def claimer(headers):
        def run(http):
            taken = []
            while items := http.post("/v1/dispatch/claim", json={"limit": 3}, headers=headers).json()["items"]:
                for item in items:
                    taken.append(item["correlation"]["ti_id"])
                    assert http.post("/v1/attempts/report", json={"state": "success"},
                                     headers=bearer(item["attempt_token"])).status_code == 200
            return taken
        return run

    results = race(_Both(replicas), [claimer(w.headers) for w in workers])
    claimed = [ti for got in results for ti in got]
    assert len(claimed) == 60 and Counter(claimed).most_common(1)[0][1] == 1
    with one.client() as http:
        assert Operator(http).run()["state"] == "success"


def test_two_replicas_sweeping_at_once_mark_each_lost_attempt_once(replicas):
    one, _ = replicas
    with one.client() as http:
        operator = Operator(http)
        operator.create_run(*(task(f"t{i:02}") for i in range(20)))
        Worker(operator).claim(20)  # claimed, never reported running: dispatch-lost at once

    def sweeper(http):
        return operator.on(http).post("/v1/admin/reap").json()["marked"].get("dispatch_lost", 0)

    assert sum(race(_Both(replicas), [sweeper] * 4)) == 20
    with one.client() as http:
        tis = operator.on(http).run()["task_instances"]
    assert {(ti["state"], ti["infra_attempts"], ti["attempt_epoch"]) for ti in tis} == {("scheduled", 1, 2)}
