"""Identity reads: one execution by its ID, a seat's history, and the occupants."""

import uuid

from tests.support.api import kube_target

EXECUTION_FIELDS = {"execution_id", "seat", "swarm", "generation", "previous_execution_id", "runtime_backend",
                    "runtime_target", "observation", "created_at", "updated_at"}
TERMINAL = {"phase": "Succeeded", "exit_code": 0, "terminal": True, "observed_at": "2026-01-01T00:00:00Z"}


def chain(operator, seat, length):
    """`length` generations of `seat`, each replacing the one before."""
    executions, previous = [], None
    for _ in range(length):
        executions.append(operator.admit(seat, previous))
        previous = executions[-1]["execution_id"]
    return executions


class TestReadExecution:
    def test_by_id_in_the_contract_shape(self, operator):
        admitted = operator.admit(backend="kubernetes", target=kube_target("uid-1"))
        resp = operator.get(f"/v1/executions/{admitted['execution_id']}")
        assert resp.status_code == 200
        body = resp.json()
        assert EXECUTION_FIELDS <= set(body)
        assert "worker_token" not in body
        assert body == {k: v for k, v in admitted.items() if k != "worker_token"}

    def test_unknown_id_is_404(self, operator):
        resp = operator.get(f"/v1/executions/{uuid.uuid4()}")
        assert resp.status_code == 404
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["type"] == "execution-not-found"

    def test_a_malformed_id_is_422(self, operator):
        resp = operator.get("/v1/executions/etl-worker-1")
        assert resp.status_code == 422
        assert "execution_id" in resp.json()["detail"]


class TestSeatHistory:
    def test_ordered_by_generation(self, operator):
        executions = chain(operator, "etl-worker-1", 3)
        items = operator.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert [e["generation"] for e in items] == [1, 2, 3]
        assert [e["execution_id"] for e in items] == [e["execution_id"] for e in executions]
        assert [e["previous_execution_id"] for e in items] == [None] + [e["execution_id"] for e in executions[:2]]

    def test_only_the_last_is_current(self, operator):
        chain(operator, "etl-worker-1", 3)
        items = operator.get("/v1/seats/etl-worker-1/executions").json()["items"]
        assert [e["superseded"] for e in items] == [True, True, False]

    def test_an_unknown_seat_has_no_history(self, operator):
        assert operator.get("/v1/seats/nobody/executions").json() == {"items": []}


class TestOccupants:
    def test_the_latest_execution_of_every_seat(self, operator):
        a = chain(operator, "seat-a", 3)
        b = chain(operator, "seat-b", 1)
        items = operator.get("/v1/occupants").json()["items"]
        assert [(e["seat"], e["execution_id"], e["generation"]) for e in items] == [
            ("seat-a", a[-1]["execution_id"], 3), ("seat-b", b[-1]["execution_id"], 1)]

    def test_terminal_observations_are_included(self, operator):
        execution = operator.admit("seat-a", backend="kubernetes", target=kube_target())
        operator.patch(f"/v1/executions/{execution['execution_id']}", json={"observation": TERMINAL})
        [occupant] = operator.get("/v1/occupants").json()["items"]
        assert occupant["observation"]["terminal"] is True
        assert occupant["observation"]["phase"] == "Succeeded"

    def test_survive_the_loss_of_the_seat_projection(self, operator):
        a = chain(operator, "seat-a", 2)
        chain(operator, "seat-b", 1)
        before = operator.get("/v1/occupants").json()
        assert operator.delete("/v1/seats/seat-a").status_code == 204
        assert operator.delete("/v1/seats/seat-b").status_code == 204
        after = operator.get("/v1/occupants").json()
        assert after == before
        assert after["items"][0]["execution_id"] == a[-1]["execution_id"]

    def test_empty_without_history(self, operator):
        operator.put("/v1/seats/plain", json={"swarm": "etl"})
        assert operator.get("/v1/occupants").json() == {"items": []}
