"""GET /v1/task-instances/{ti_id}/fence (contract 11.4): where a task instance's fence stands,
for operators and for that task instance's own attempt tokens."""

import uuid

from tests.support.api import Worker, assert_problem, bearer, json_of, superseded, task, ti_ids


def fence_of(client, ti_id: str, headers: dict[str, str]) -> dict:
    return json_of(client.get(f"/v1/task-instances/{ti_id}/fence", headers=headers))


class TestReadFence:
    def test_the_operator_and_every_attempt_of_the_task_instance_read_the_live_epoch(self, operator):
        old, new = superseded(operator)
        expected = {"try_number": 1, "attempt_epoch": new.epoch, "fencing_token": new.epoch, "state": "running"}
        assert fence_of(operator.client, new.ti_id, operator.headers) == expected
        assert fence_of(operator.client, new.ti_id, new.headers) == expected
        # The superseded attempt may ask too: it learns its token is below the fence.
        assert fence_of(operator.client, old.ti_id, old.headers)["fencing_token"] > old.epoch

    def test_it_follows_the_rails(self, operator):
        ti_id = ti_ids(operator.create_run(task("a")))["a"]
        assert fence_of(operator.client, ti_id, operator.headers) == {
            "try_number": 1, "attempt_epoch": 0, "fencing_token": 0, "state": "scheduled"}
        attempt = Worker(operator).claim_one()
        attempt.report("success")
        json_of(operator.post(f"/v1/task-instances/{ti_id}/clear"))
        fence = fence_of(operator.client, ti_id, attempt.headers)
        assert (fence["fencing_token"], fence["state"]) == (attempt.epoch + 1, "scheduled")

    def test_another_task_instances_attempt_token_is_forbidden(self, operator):
        run = operator.create_run(task("a"), task("b"))
        attempt = Worker(operator).claim(2)[0]
        other = next(ti for task_id, ti in ti_ids(run).items() if ti != attempt.ti_id)
        for ti_id in (other, str(uuid.uuid4())):  # whether or not it exists: nothing leaks
            assert_problem(operator.client.get(f"/v1/task-instances/{ti_id}/fence", headers=attempt.headers),
                           403, "forbidden")

    def test_an_unknown_task_instance_is_404_and_other_tokens_are_refused(self, operator):
        unknown = f"/v1/task-instances/{uuid.uuid4()}/fence"
        assert_problem(operator.get(unknown), 404, "task-instance-not-found")
        ti_id = ti_ids(operator.create_run(task("a")))["a"]
        worker = Worker(operator)
        assert_problem(operator.client.get(f"/v1/task-instances/{ti_id}/fence", headers=worker.headers),
                       403, "forbidden")
        assert_problem(operator.client.get(f"/v1/task-instances/{ti_id}/fence"), 401, "unauthorized")
        assert_problem(operator.client.get(f"/v1/task-instances/{ti_id}/fence", headers=bearer("x.y.z")),
                       401, "unauthorized")

    def test_the_document_declares_its_typed_refusals(self, client):
        operation = client.get("/openapi.json").json()["paths"]["/v1/task-instances/{ti_id}/fence"]["get"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/FencePublic"}
        for status in ("403", "404"):
            assert operation["responses"][status]["content"]["application/problem+json"]["schema"] == {
                "$ref": "#/components/schemas/FenceRefusal"}
        assert "401" in operation["responses"]
