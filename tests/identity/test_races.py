"""Races with real concurrency: threads released together by a barrier, each with its own
HTTP connection to a real server, on SQLite and PostgreSQL."""

from tests.support.api import Operator, kube_target
from tests.support.concurrency import race
from tests.support.scrape import identity_conflicts

THREADS = 16
ROUNDS = 3
# Writers that repeat until refused contend hard for SQLite's single write lock; fewer of them
# still overlap every admission and keep the suite fast.
WRITERS = 5
MAX_WRITES = 500  # a bound on the writers that keep writing until the race is decided


def admitting(operator, seat, previous, **body):
    def worker(client):
        return operator.on(client).admission(seat, previous, **body)
    return worker


def binding(operator, url, pod_uid):
    return lambda client: operator.on(client).patch(url, json={"pod_uid": pod_uid})


def until_refused(write):
    """A worker that repeats `write` until it is refused; answers (successful writes, the refusal)."""
    def worker(client):
        written = []
        for n in range(MAX_WRITES):
            resp = write(client, n)
            if resp.status_code not in (200, 201):
                return written, resp
            written.append(n)
        raise AssertionError(f"never refused after {MAX_WRITES} writes")
    return worker


class TestAdmissionRace:
    def test_one_admission_per_predecessor_and_contiguous_generations(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
            refusals = identity_conflicts(operator, "race", "stale-predecessor")
            previous = None
            for _ in range(ROUNDS):
                responses = race(live_server, [admitting(operator, "racer", previous, swarm="race")] * THREADS)
                winners = [r.json() for r in responses if r.status_code == 201]
                losers = [r for r in responses if r.status_code != 201]
                assert len(winners) == 1, [r.text for r in responses]
                assert {(r.status_code, r.json()["type"]) for r in losers} == {(409, "stale-predecessor")}
                assert {r.json()["current_execution_id"] for r in losers} == {winners[0]["execution_id"]}
                previous = winners[0]["execution_id"]
            history = operator.get("/v1/seats/racer/executions").json()["items"]
            assert [e["generation"] for e in history] == list(range(1, ROUNDS + 1))
            assert [e["previous_execution_id"] for e in history[1:]] == [e["execution_id"] for e in history[:-1]]
            assert operator.get("/v1/seats/racer").json()["execution_id"] == previous
            assert identity_conflicts(operator, "race", "stale-predecessor") == refusals + ROUNDS * (THREADS - 1)


class TestBindingRace:
    def test_one_of_many_pod_uids_binds(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
            execution = operator.admit("racer", backend="kubernetes", target=kube_target())
            url = f"/v1/executions/{execution['execution_id']}"
            responses = race(live_server, [binding(operator, url, f"uid-{i}") for i in range(THREADS)])
            [winner] = [i for i, r in enumerate(responses) if r.status_code == 200]
            assert {(r.status_code, r.json()["type"]) for r in responses if r.status_code != 200} == {
                (409, "identity-conflict")}
            assert operator.get(url).json()["runtime_target"]["pod_uid"] == f"uid-{winner}"
            # A losing UID was not recorded: another execution may still bind it.
            loser = next(i for i in range(THREADS) if i != winner)
            operator.admit("other", backend="kubernetes", target=kube_target(f"uid-{loser}"))

    def test_one_pod_uid_binds_to_one_of_many_executions(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
            executions = [operator.admit(f"racer-{i}", backend="kubernetes", target=kube_target())
                          for i in range(THREADS)]
            urls = [f"/v1/executions/{e['execution_id']}" for e in executions]
            responses = race(live_server, [binding(operator, url, "shared") for url in urls])
            assert sorted(r.status_code for r in responses) == [200] + [409] * (THREADS - 1)
            assert {r.json()["type"] for r in responses if r.status_code == 409} == {"pod-uid-reused"}
            bound = [operator.get(u).json()["runtime_target"].get("pod_uid") for u in urls]
            assert bound.count("shared") == 1


class TestPlainWriterRace:
    def test_plain_writes_never_overwrite_admitted_identity(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
            for round in range(ROUNDS):
                seat = f"contested-{round}"
                if round % 2:  # the seat starts as a plain record, or does not exist yet
                    operator.put(f"/v1/seats/{seat}", json={"swarm": "plain"}).raise_for_status()

                def plain(c, n, writer, seat=seat):
                    return operator.on(c).put(f"/v1/seats/{seat}",
                                              json={"swarm": "plain", "labels": {"writer": f"{writer}-{n}"}})

                writers = [until_refused(lambda c, n, w=w: plain(c, n, w)) for w in range(WRITERS)]
                admission = admitting(operator, seat, None, swarm="admitted", labels={"by": "admission"})
                *written, admitted = race(live_server, [*writers, admission])
                assert admitted.status_code == 201, admitted.text
                for _, refusal in written:
                    assert (refusal.status_code, refusal.json()["type"]) == (409, "admission-required")
                shown = operator.get(f"/v1/seats/{seat}").json()
                assert shown["execution_id"] == admitted.json()["execution_id"]
                assert (shown["swarm"], shown["labels"], shown["generation"]) == ("admitted", {"by": "admission"}, 1)
                history = operator.get(f"/v1/seats/{seat}/executions").json()["items"]
                assert [e["execution_id"] for e in history] == [admitted.json()["execution_id"]]


class TestResumeRace:
    def test_stale_resume_writes_never_land_on_the_new_execution(self, live_server):
        with live_server.client() as client:
            operator = Operator(client)
            current = operator.admit("agent")
            for _ in range(ROUNDS):
                old = current["execution_id"]

                def stale(c, n, writer, old=old):
                    return operator.on(c).put("/v1/seats/agent/resume", json={
                        "expected_execution_id": old, "resume_token": f"stale-{writer}-{n}"})

                def rotate(c, old=old):
                    """Admit the successor, then write its own token: the last word, unless a
                    stale write lands after the rotation."""
                    new = operator.on(c).admit("agent", old)
                    token = f"new-{new['execution_id']}"
                    resp = operator.on(c).put("/v1/seats/agent/resume", json={
                        "expected_execution_id": new["execution_id"], "resume_token": token})
                    assert resp.status_code == 200, resp.text
                    return new

                writers = [until_refused(lambda c, n, w=w: stale(c, n, w)) for w in range(WRITERS)]
                *written, current = race(live_server, [*writers, rotate])
                for _, refusal in written:
                    assert (refusal.status_code, refusal.json()["type"]) == (409, "execution-rotated")
                    assert refusal.json()["current_execution_id"] == current["execution_id"]
                shown = operator.get("/v1/seats/agent").json()
                assert shown["execution_id"] == current["execution_id"]
                assert shown["resume_token"] == f"new-{current['execution_id']}"
