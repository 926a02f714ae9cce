"""OpenTelemetry traces (contract 8), caught by the SDK's in-memory span exporter: requests and
database calls are spans, an incoming traceparent is continued, and a run's trace_id is the
trace of its tasks' claims and reports."""

from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.telemetry.traceparent import run_traceparent, traceparent, w3c_trace_id
from tests.support.api import Operator, Worker, json_of, task
from tests.support.tracing import EXPORTER, TRACE, catch_spans

PARENT = "00f067aa0ba902b7"


@pytest.fixture(scope="module", autouse=True)
def _provider() -> None:
    catch_spans()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


@pytest.fixture
def operator(shared_apps: Callable[..., FastAPI]) -> Iterator[Operator]:
    """The operator on the module's app with tracing, started for the test."""
    with TestClient(shared_apps(otel=True)) as client:
        yield Operator(client)


def trace_of(span: ReadableSpan) -> str:
    return format(span.context.trace_id, "032x")


def server_spans(spans: InMemorySpanExporter, route: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans()
            if s.kind == trace.SpanKind.SERVER and s.attributes.get("http.route") == route]


class TestRequests:
    def test_an_incoming_traceparent_is_continued(self, operator, spans):
        operator.get("/v1/runs", headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
        (span,) = server_spans(spans, "/v1/runs")
        assert trace_of(span) == TRACE and format(span.parent.span_id, "016x") == PARENT

    def test_database_calls_are_spans_of_the_request(self, operator, spans):
        operator.get("/v1/runs", headers={"traceparent": f"00-{TRACE}-{PARENT}-01"})
        # Spans with a parent only: the server's own background reads (the wake-up hub's read of
        # the next due time when its listener connects, a reaper sweep) are traces of their own,
        # and may land while the request runs. A request's database call without the request's
        # context would be such a root too, and leave this list empty.
        database = [s for s in spans.get_finished_spans() if s.parent is not None and (
            s.attributes.get("db.system") or s.attributes.get("db.system.name"))]
        assert database and all(trace_of(s) == TRACE for s in database)

    def test_a_run_created_in_a_trace_takes_it_as_its_trace_id(self, operator):
        body = {"dag_id": "dag", "run_id": "run", "tasks": [task("t")]}
        run = operator.post("/v1/runs", json=body, headers={"traceparent": f"00-{TRACE}-{PARENT}-01"}).json()
        assert run["trace_id"] == TRACE


def assert_one_tree(spans: list[ReadableSpan]) -> ReadableSpan:
    """Every span's parent is one of `spans` (exported), but one root's: answers the root."""
    ids = {s.context.span_id for s in spans}
    roots = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
    assert len(roots) == 1, [(s.name, s.parent) for s in roots]
    return roots[0]


class TestRunTree:
    def test_a_runs_claim_and_reports_hang_off_its_exported_root(self, operator, spans):
        run = operator.create_run()  # in the creating request's trace
        attempt = Worker(operator).claim_one()
        header = {"traceparent": run_traceparent(attempt.item["correlation"])}  # what a worker sends
        for state in ("running", "success"):
            assert attempt.client.post("/v1/attempts/report", json={"state": state},
                                       headers={**attempt.headers, **header}).status_code == 200
        in_run = [s for s in spans.get_finished_spans() if trace_of(s) == run["trace_id"]]
        root = assert_one_tree(in_run)
        assert root.kind == trace.SpanKind.SERVER and root.attributes["http.route"] == "/v1/runs"
        (run_root,) = [s for s in in_run if s.name == "fenceline.run"]
        (claim,) = [s for s in in_run if s.name == "fenceline.claim"]
        assert run_root.parent.span_id == root.context.span_id and claim.parent.span_id == run_root.context.span_id
        reports = server_spans(spans, "/v1/attempts/report")
        assert len(reports) == 2 and {r.parent.span_id for r in reports} == {run_root.context.span_id}

    def test_a_batched_report_hangs_off_the_traceparent_of_its_entry(self, operator, spans):
        """A batch is one request for many runs: each entry carries its run's traceparent (what
        the single request's header carries), and its span is a child of it."""
        runs = [operator.create_run(run_id=f"r{n}") for n in range(2)]
        worker = Worker(operator)
        attempts = sorted(worker.claim(2), key=lambda a: a.item["correlation"]["run_id"])
        entries = [{"attempt_token": a.token, "op": "report", "state": state,
                    "traceparent": run_traceparent(a.item["correlation"])}
                   for state in ("running", "success") for a in attempts]
        entries.append({"attempt_token": attempts[0].token, "op": "heartbeat"})  # no traceparent: no span
        results = json_of(worker.client.post("/v1/attempts/batch", json={"entries": entries},
                                             headers=worker.headers))["results"]
        assert [r["status"] for r in results] == [200, 200, 200, 200, 409]
        (request,) = server_spans(spans, "/v1/attempts/batch")
        batched = [s for s in spans.get_finished_spans() if s.name.startswith("fenceline.batch.")]
        assert [s.name for s in batched] == ["fenceline.batch.report"] * 4
        for run in runs:
            in_run = [s for s in spans.get_finished_spans() if trace_of(s) == run["trace_id"]]
            (run_root,) = [s for s in in_run if s.name == "fenceline.run"]
            reports = [s for s in in_run if s.name == "fenceline.batch.report"]
            assert len(reports) == 2 and {r.parent.span_id for r in reports} == {run_root.context.span_id}
            assert all([link.context.span_id for link in r.links] == [request.context.span_id] for r in reports)
            assert {r.attributes["fenceline.batch.status"] for r in reports} == {200}

    def test_an_entry_not_sampled_makes_no_span_and_an_unknown_op_is_named_invalid(self, operator, spans):
        """An entry's traceparent counts as its single request's header would: one whose flags do
        not ask for sampling records nothing; a span's name never takes an op the batch refused."""
        operator.create_run()
        worker = Worker(operator)
        attempt = worker.claim_one()
        sampled = run_traceparent(attempt.item["correlation"])
        entries = [{"attempt_token": attempt.token, "op": "report", "state": "running",
                    "traceparent": sampled[:-2] + "00"},
                   {"attempt_token": attempt.token, "op": "x" * 200, "traceparent": sampled}]
        results = json_of(worker.client.post("/v1/attempts/batch", json={"entries": entries},
                                             headers=worker.headers))["results"]
        assert [r["status"] for r in results] == [200, 422]
        batched = [s for s in spans.get_finished_spans() if s.name.startswith("fenceline.batch.")]
        assert [(s.name, s.attributes["fenceline.batch.status"]) for s in batched] == [("fenceline.batch.invalid", 422)]

    def test_a_run_with_a_trace_of_its_own_is_the_root_of_it(self, operator, spans):
        body = {"dag_id": "dag", "run_id": "run", "tasks": [task("t")], "trace_id": "order-1234"}
        assert operator.post("/v1/runs", json=body).status_code == 201
        Worker(operator).claim_one()
        in_run = [s for s in spans.get_finished_spans() if trace_of(s) == w3c_trace_id("order-1234")]
        root = assert_one_tree(in_run)
        assert root.name == "fenceline.run" and root.parent is None
        assert {s.name for s in in_run} == {"fenceline.run", "fenceline.claim"}

    def test_no_span_of_the_asgi_layers_receive_and_send(self, operator, spans):
        operator.create_run()
        Worker(operator).claim_one()
        assert spans.get_finished_spans()
        assert not [s for s in spans.get_finished_spans() if s.kind == trace.SpanKind.INTERNAL
                    and s.name.endswith((" http receive", " http send"))]


class TestRunTrace:
    def test_claim_and_report_spans_are_in_the_runs_trace(self, operator, spans):
        run = operator.create_run()
        attempt = Worker(operator).claim_one()
        (claim,) = [s for s in spans.get_finished_spans() if s.name == "fenceline.claim"]
        assert trace_of(claim) == run["trace_id"]
        (request,) = server_spans(spans, "/v1/dispatch/claim")
        assert [link.context.span_id for link in claim.links] == [request.context.span_id]
        # An agent reports with the run's traceparent (the reference worker does: app/worker/tracing.py).
        header = {"traceparent": traceparent(w3c_trace_id(attempt.item["correlation"]["trace_id"]))}
        attempt.client.post("/v1/attempts/report", json={"state": "running"}, headers={**attempt.headers, **header})
        (report,) = server_spans(spans, "/v1/attempts/report")
        assert trace_of(report) == run["trace_id"]

    def test_a_run_trace_id_not_in_w3c_form_maps_to_one_trace(self, operator, spans):
        body = {"dag_id": "dag", "run_id": "run", "tasks": [task("t")], "trace_id": "order-1234"}
        assert operator.post("/v1/runs", json=body).status_code == 201
        Worker(operator).claim_one()
        (claim,) = [s for s in spans.get_finished_spans() if s.name == "fenceline.claim"]
        assert trace_of(claim) == w3c_trace_id("order-1234")

    def test_a_claim_of_several_runs_links_each_runs_trace(self, operator, spans):
        traces = [operator.create_run(run_id=f"r{n}")["trace_id"] for n in range(3)]
        assert len(Worker(operator).claim(10)) == 3
        (claim,) = [s for s in spans.get_finished_spans() if s.name == "fenceline.claim"]
        (request,) = server_spans(spans, "/v1/dispatch/claim")
        assert trace_of(claim) == trace_of(request)
        linked = {format(link.context.trace_id, "032x") for link in claim.links}
        assert linked == {*traces, trace_of(request)}
        assert claim.attributes["fenceline.claim.runs"] == 3

    def test_an_empty_claim_makes_no_claim_span(self, operator, spans):
        Worker(operator).claim(10)
        assert not [s for s in spans.get_finished_spans() if s.name == "fenceline.claim"]
