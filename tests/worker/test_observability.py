"""The worker's side of contract 8: its JSON log lines, and a run's trace reaching its task
(TRACEPARENT) and the server (its calls' traceparent)."""

import json

import pytest

from app.telemetry.traceparent import w3c_trace_id
from tests.support.agents import python_task
from tests.support.api import Operator
from tests.support.otlp import OtlpReceiver
from tests.support.tracing import EXPORTER, TRACE, catch_spans
from tests.support.waiting import wait_until

PRINTS_TRACEPARENT = "import os; print('traceparent', os.environ['TRACEPARENT'])"


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    catch_spans()


class TestTrace:
    def test_the_task_gets_the_runs_trace_and_the_reports_continue_it(self, serve, workers):
        server = serve(otel=True)
        operator = Operator(server.client())
        body = {"dag_id": "dag", "run_id": "run", "tasks": [python_task("w3c", PRINTS_TRACEPARENT),
                                                             python_task("own", PRINTS_TRACEPARENT)]}
        EXPORTER.clear()
        assert operator.post("/v1/runs", json={**body, "trace_id": TRACE}).status_code == 201
        body["run_id"] = "mine"
        assert operator.post("/v1/runs", json={**body, "trace_id": "order-1234"}).status_code == 201
        worker = workers(server, "etl-a")
        wait_until(lambda: operator.run()["state"] == "success" and operator.run("dag", "mine")["state"] == "success",
                   "both runs to succeed")
        assert worker.stop() == 0
        for run_id, expected in (("run", TRACE), ("mine", w3c_trace_id("order-1234"))):
            ti = operator.find_ti("w3c", run_id=run_id)
            (line,) = [line for line in operator.log(ti["ti_id"]).splitlines() if line.startswith("traceparent")]
            assert line.split()[1].startswith(f"00-{expected}-") and line.endswith("-01")
            # Reports go in batches, each entry with its run's traceparent (app/telemetry/tracing.batch_entries).
            reports = [s for s in EXPORTER.get_finished_spans() if s.name == "fenceline.batch.report"
                       and format(s.context.trace_id, "032x") == expected]
            assert len(reports) >= 4  # running and success, of two tasks
            # without tracing in the worker, its calls and its task name the run's root as their parent
            (root,) = [s for s in EXPORTER.get_finished_spans() if s.name == "fenceline.run"
                       and s.attributes["fenceline.run_id"] == run_id]
            assert format(root.context.trace_id, "032x") == expected
            assert {r.parent.span_id for r in reports} == {root.context.span_id}
            assert line.split()[1] == f"00-{expected}-{root.context.span_id:016x}-01"

    def test_a_traced_workers_attempt_and_calls_are_children_of_the_runs_root(self, serve, workers):
        server = serve(otel=True)
        operator = Operator(server.client())
        EXPORTER.clear()
        run = operator.create_run(python_task("t", PRINTS_TRACEPARENT))
        with OtlpReceiver() as receiver:
            worker = workers(server, "etl-a", extra_env={"FENCELINE_OTEL": "1", "OTEL_BSP_SCHEDULE_DELAY": "50",
                                                         "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
            wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
            assert worker.stop() == 0
            worker_spans = receiver.spans()
        (root,) = [s for s in EXPORTER.get_finished_spans() if s.name == "fenceline.run"]
        in_run = [s for s in worker_spans if s.trace_id.hex() == run["trace_id"]]
        (attempt,) = [s for s in in_run if s.name == "fenceline.worker.attempt"]
        assert int.from_bytes(attempt.parent_span_id, "big") == root.context.span_id
        # Its reports went in batches: the server's span of each entry is a child of the attempt.
        reports = [s for s in EXPORTER.get_finished_spans() if s.name == "fenceline.batch.report"
                   and format(s.context.trace_id, "032x") == run["trace_id"]]
        assert len(reports) == 2 and {r.parent.span_id for r in reports} == {int.from_bytes(attempt.span_id, "big")}
        assert "POST /v1/attempts/batch" in {s.name for s in worker_spans}
        assert all(s.name != "POST" for s in worker_spans)  # every call is named by its route
        ti = operator.find_ti("t")
        (line,) = [line for line in operator.log(ti["ti_id"]).splitlines() if line.startswith("traceparent")]
        assert line.split()[1] == f"00-{run['trace_id']}-{attempt.span_id.hex()}-01"


class TestJsonLogs:
    def test_every_line_of_the_worker_is_a_json_object_naming_its_seat(self, server, workers):
        operator = Operator(server.client())
        run = operator.create_run(python_task("t", "print('hello')"))
        worker = workers(server, "etl-a", extra_env={"FENCELINE_LOG_FORMAT": "json"})
        wait_until(lambda: operator.run()["state"] == "success", "the run to succeed")
        assert worker.stop() == 0
        lines = [json.loads(line) for line in worker.output.splitlines() if line.strip()]
        assert lines and all({"timestamp", "level", "message"} <= line.keys() for line in lines)
        assert all(line["seat"] == "etl-a" for line in lines)
        assert any(line["message"].startswith("admitted seat etl-a") for line in lines)
        (started,) = [line for line in lines if " started " in line["message"]]
        ti = run["task_instances"][0]
        assert (started["ti_id"], started["try_number"], started["attempt_epoch"]) == (ti["ti_id"], 1, 1)
        assert started["trace_id"] == w3c_trace_id(run["trace_id"])
