"""Attempt log ingest and a try's log across epochs."""

import json

from tests.support.api import Operator, Worker, assert_problem, assert_stale, task


class TestAppend:
    def test_append_stores_under_the_epoch_key(self, operator, store):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        assert attempt.append_log(0, "hello\n") == {"size": 6}
        assert b"".join(store.read(f"dag/run/t/-1/1.e{attempt.epoch}.log")) == b"hello\n"

    def test_a_retried_chunk_is_not_written_twice(self, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.append_log(0, "one\n")
        assert attempt.append_log(0, "one\n") == {"size": 4}
        assert attempt.append_log(4, "two\n") == {"size": 8}
        assert attempt.append_log(2, "e\ntwo\nthree\n") == {"size": 14}
        assert operator.log(_ti(operator)).endswith("one\ntwo\nthree\n")

    def test_different_bytes_at_a_stored_offset_are_refused(self, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.append_log(0, "abc\n")
        body = assert_problem(attempt.send_log(0, "xyz\n"), 409, "log-offset-conflict")
        assert body["stored_size"] == 4
        assert operator.log(_ti(operator)).endswith("abc\n")

    def test_a_gap_is_refused_with_the_stored_size(self, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.append_log(0, "abc")
        assert assert_problem(attempt.send_log(10, "zzz"), 409, "log-offset-gap")["stored_size"] == 3

    def test_a_superseded_attempt_cannot_append(self, operator):
        operator.create_run()
        worker = Worker(operator)
        first = worker.claim_one()
        first.report("unexecutable", reason="evicted")
        worker.claim_one()
        assert_stale(first.send_log(0, "late\n"))

    def test_request_and_attempt_limits_are_413(self, make_client, store_name):
        limited = Operator(make_client(log_store=store_name, log_max_request_bytes=8, log_max_attempt_bytes=12))
        limited.create_run()
        attempt = Worker(limited).claim_one()
        assert_problem(attempt.send_log(0, "x" * 9), 413, "payload-too-large")
        attempt.append_log(0, "x" * 8)
        assert_problem(attempt.send_log(8, "y" * 8), 413, "log-too-large")


def _ti(operator):
    return operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]


class TestTryLog:
    def test_epochs_in_order_each_behind_one_system_line(self, operator):
        operator.create_run(task("t", max_infra_attempts=3))
        worker = Worker(operator)
        contents = []
        for n, outcome in enumerate(["evicted", "node_lost", None]):
            attempt = worker.claim_one()
            attempt.report("running")
            attempt.append_log(0, f"epoch-{n} line\n")
            if outcome:
                attempt.report("unexecutable", reason=outcome)
            else:
                attempt.report("success")
            contents.append(attempt.epoch)
        text = operator.log(_ti(operator))
        lines = text.splitlines()
        system = [line for line in lines if line.startswith("::fenceline::")]
        assert len(system) == 3
        assert [line for line in lines if not line.startswith("::fenceline::")] == [
            "epoch-0 line", "epoch-1 line", "epoch-2 line"]
        assert f"epoch {contents[0]}" in system[0] and "first attempt" in system[0]
        assert "(seat worker-1, generation 1)" in system[0]
        assert f"epoch {contents[1]}" in system[1] and "evicted" in system[1]
        assert f"epoch {contents[2]}" in system[2] and "node_lost" in system[2]

    def test_an_epoch_that_wrote_nothing_still_gets_its_line(self, operator):
        operator.create_run()
        worker = Worker(operator)
        worker.claim_one().report("unexecutable", reason="dispatch_failed")
        worker.claim_one().append_log(0, "ran\n")
        text = operator.log(_ti(operator))
        assert text.count("::fenceline::") == 2 and "dispatch_failed" in text and text.endswith("ran\n")

    def test_a_legacy_epoch_zero_object_is_still_served(self, operator, put):
        operator.create_run()
        put("dag/run/t/-1/1.log", b"written before the fence\n")
        text = operator.log(_ti(operator))
        assert text.count("::fenceline::") == 1 and text.endswith("written before the fence\n")

    def test_every_route_reads_the_same_lines_answered_whole_or_streamed(self, operator):
        """A small log is answered whole, read in the request's own transaction; one past
        256 KiB is streamed on the store's own connections: each Airflow route reads the same
        lines either way, every epoch in order."""
        operator.create_run(task("t", max_infra_attempts=2))
        worker = Worker(operator)
        first = worker.claim_one()
        first.append_log(0, "before the eviction\n")
        first.report("unexecutable", reason="evicted")
        second = worker.claim_one()
        second.report("running")
        offset = second.append_log(0, "small\n")["size"]
        v2 = "/api/v2/dags/dag/dagRuns/run/taskInstances/t/logs/1"
        v1 = "/api/v1/dags/dag/dagRuns/run/taskInstances/t/logs/1"
        for extra in ([], [f"line {i} " + "x" * 90 for i in range(3_000)]):  # then 300 KB more
            if extra:
                second.append_log(offset, "".join(line + "\n" for line in extra))
            expected = operator.log(_ti(operator)).splitlines()
            assert expected[-1] == (extra[-1] if extra else "small") and len(expected) == 4 + len(extra)
            full = operator.get(v2, params={"full_content": "true"}).json()["content"]
            ndjson = operator.get(v2, headers={"Accept": "application/x-ndjson"}).text.splitlines()
            text = operator.get(v1, headers={"Accept": "text/plain"}).text.splitlines()
            assert [line["event"] for line in full] == expected
            assert [json.loads(line)["event"] for line in ndjson] == expected
            assert text == expected

    def test_unknown_try_is_404(self, operator):
        operator.create_run()
        resp = operator.get(f"/v1/task-instances/{_ti(operator)}/tries/2/log")
        assert resp.status_code == 404


def test_logs_stay_out_of_the_snapshot(operator):
    operator.create_run()
    Worker(operator).claim_one().append_log(0, "not exported\n")
    snapshot = operator.get("/v1/admin/snapshot")
    assert "log_chunks" not in snapshot.json()["tables"] and "not exported" not in snapshot.text
