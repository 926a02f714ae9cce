"""Attempt log ingest and a try's log across epochs."""

from tests.conftest import TEST_DATA_DIR
from tests.flows import append_log, claim_one, create_run, report, task, worker


def _try_log(client, operator, ti_id, try_number=1):
    resp = client.get(f"/v1/task-instances/{ti_id}/tries/{try_number}/log", headers=operator)
    assert resp.status_code == 200, resp.text
    return resp.text


class TestAppend:
    def test_append_stores_under_the_epoch_key(self, client, operator):
        create_run(client, operator)
        item, attempt = claim_one(client, worker(client, operator))
        assert append_log(client, attempt, 0, "hello\n") == {"size": 6}
        epoch = item["correlation"]["attempt_epoch"]
        stored = TEST_DATA_DIR / "logs" / "dag" / "run" / "t" / "-1" / f"1.e{epoch}.log"
        assert stored.read_bytes() == b"hello\n"

    def test_a_retried_chunk_is_not_written_twice(self, client, operator):
        create_run(client, operator)
        _, attempt = claim_one(client, worker(client, operator))
        append_log(client, attempt, 0, "one\n")
        assert append_log(client, attempt, 0, "one\n") == {"size": 4}
        assert append_log(client, attempt, 4, "two\n") == {"size": 8}
        assert append_log(client, attempt, 2, "e\ntwo\nthree\n") == {"size": 14}
        assert _try_log(client, operator, _ti(client, operator)).endswith("one\ntwo\nthree\n")

    def test_different_bytes_at_a_stored_offset_are_refused(self, client, operator):
        create_run(client, operator)
        _, attempt = claim_one(client, worker(client, operator))
        append_log(client, attempt, 0, "abc\n")
        body = append_log(client, attempt, 0, "xyz\n", expect=409)
        assert body["type"] == "log-offset-conflict" and body["stored_size"] == 4
        assert _try_log(client, operator, _ti(client, operator)).endswith("abc\n")

    def test_a_gap_is_refused_with_the_stored_size(self, client, operator):
        create_run(client, operator)
        _, attempt = claim_one(client, worker(client, operator))
        append_log(client, attempt, 0, "abc")
        body = append_log(client, attempt, 10, "zzz", expect=409)
        assert body["type"] == "log-offset-gap" and body["stored_size"] == 3

    def test_a_superseded_attempt_cannot_append(self, client, operator):
        create_run(client, operator)
        w = worker(client, operator)
        _, first = claim_one(client, w)
        report(client, first, "unexecutable", reason="evicted")
        claim_one(client, w)
        body = append_log(client, first, 0, "late\n", expect=409)
        assert body["type"] == "stale-report" and body["should_terminate"] is True

    def test_request_and_attempt_limits_are_413(self, make_client, operator):
        client = make_client(log_max_request_bytes=8, log_max_attempt_bytes=12)
        from tests.conftest import login
        op = login(client)
        create_run(client, op)
        _, attempt = claim_one(client, worker(client, op))
        assert append_log(client, attempt, 0, "x" * 9, expect=413)["type"] == "payload-too-large"
        append_log(client, attempt, 0, "x" * 8)
        assert append_log(client, attempt, 8, "y" * 8, expect=413)["type"] == "log-too-large"


def _ti(client, operator):
    return client.get("/v1/runs/dag/run", headers=operator).json()["task_instances"][0]["ti_id"]


class TestTryLog:
    def test_epochs_in_order_each_behind_one_system_line(self, client, operator):
        create_run(client, operator, tasks=[task("t", max_infra_attempts=3)])
        w = worker(client, operator)
        contents = []
        for n, outcome in enumerate(["evicted", "node_lost", None]):
            item, attempt = claim_one(client, w)
            report(client, attempt, "running")
            append_log(client, attempt, 0, f"epoch-{n} line\n")
            if outcome:
                report(client, attempt, "unexecutable", reason=outcome)
            else:
                report(client, attempt, "success")
            contents.append(item["correlation"]["attempt_epoch"])
        text = _try_log(client, operator, _ti(client, operator))
        lines = text.splitlines()
        system = [line for line in lines if line.startswith("::fenceline::")]
        assert len(system) == 3
        assert [line for line in lines if not line.startswith("::fenceline::")] == [
            "epoch-0 line", "epoch-1 line", "epoch-2 line"]
        assert f"epoch {contents[0]}" in system[0] and "first attempt" in system[0]
        assert "(seat worker-1, generation 1)" in system[0]
        assert f"epoch {contents[1]}" in system[1] and "evicted" in system[1]
        assert f"epoch {contents[2]}" in system[2] and "node_lost" in system[2]

    def test_an_epoch_that_wrote_nothing_still_gets_its_line(self, client, operator):
        create_run(client, operator)
        w = worker(client, operator)
        _, attempt = claim_one(client, w)
        report(client, attempt, "unexecutable", reason="dispatch_failed")
        _, attempt = claim_one(client, w)
        append_log(client, attempt, 0, "ran\n")
        text = _try_log(client, operator, _ti(client, operator))
        assert text.count("::fenceline::") == 2 and "dispatch_failed" in text and text.endswith("ran\n")

    def test_a_legacy_epoch_zero_object_is_still_served(self, client, operator):
        create_run(client, operator)
        legacy = TEST_DATA_DIR / "logs" / "dag" / "run" / "t" / "-1" / "1.log"
        legacy.parent.mkdir(parents=True, exist_ok=True)
        legacy.write_bytes(b"written before the fence\n")
        text = _try_log(client, operator, _ti(client, operator))
        assert text.count("::fenceline::") == 1 and text.endswith("written before the fence\n")

    def test_unknown_try_is_404(self, client, operator):
        create_run(client, operator)
        resp = client.get(f"/v1/task-instances/{_ti(client, operator)}/tries/2/log", headers=operator)
        assert resp.status_code == 404
