"""Hostile input: bodies bounded before parsing or authentication (413), JSON no route may take
(422: too deep, not finite, not UTF-8), and input no column can hold (422) — never a 500, and
nothing changes."""

import json
import socket
import threading
import time
import uuid
from urllib.parse import urlsplit

import pytest
from sqlalchemy import insert

from app.db.types import utcnow
from app.main import create_app
from app.ops.migrate import upgrade
from app.orchestration.models import DagRun
from app.web.serving import server_config
from tests.support.api import Operator, Worker, admission_body, assert_problem, bearer, task
from tests.support.databases import throwaway_database
from tests.support.servers import LiveServer, ThreadedUvicorn
from tests.support.settings import app_settings

LONE_SURROGATE = '"\\ud800"'  # valid JSON, not valid Unicode


def post_raw(client, path, body: str, headers):
    return client.post(path, content=body, headers={**headers, "content-type": "application/json"})


class TestText:
    def test_a_lone_surrogate_password_is_422(self, client):
        resp = post_raw(client, "/auth/token", f'{{"username": "admin", "password": {LONE_SURROGATE}}}', {})
        assert resp.status_code == 422
        assert resp.headers["content-type"].startswith("application/problem+json")

    def test_nul_and_surrogates_in_stored_text_are_422_and_admit_nothing(self, client, operator):
        for bad in ('"a\\u0000b"', LONE_SURROGATE):
            body = json.dumps(admission_body()).replace('"etl"', bad)
            resp = post_raw(client, "/v1/seats/s1/executions", body, operator.headers)
            assert resp.status_code == 422, resp.text
        assert operator.get("/v1/seats/s1/executions").json() == {"items": []}

    def test_a_lone_surrogate_in_a_log_append_is_422(self, client, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        resp = post_raw(client, "/v1/attempts/logs", f'{{"offset": 0, "content": {LONE_SURROGATE}}}', attempt.headers)
        assert resp.status_code == 422


class TestNumbers:
    def test_huge_paging_numbers_are_422_and_airflows_limit_is_clamped(self, operator):
        assert operator.get("/v1/runs", params={"offset": 10**23}).status_code == 422
        # Airflow clamps a limit past its largest page instead of refusing it (docs/airflow-compat.md).
        assert operator.get("/api/v2/dags", params={"limit": 10**23}).status_code == 200

    @pytest.mark.parametrize("field", ["priority_weight", "pool_slots"])
    def test_a_boolean_is_no_count_nor_weight(self, operator, field):
        """Issue 30 (schemathesis): `false` was taken for 0, which the document does not allow."""
        resp = operator.post("/v1/runs", json={"dag_id": "d", "tasks": [task("a", **{field: False})]})
        assert_problem(resp, 422, "validation-error")
        assert operator.get("/v1/runs").json()["items"] == []

    def test_a_boolean_is_no_pool_size_nor_tenant_cap(self, operator):
        assert_problem(operator.post("/v1/pools", json={"name": "p", "slots": False}), 422, "validation-error")
        assert_problem(operator.put("/v1/tenants/acme", json={"max_running": False}), 422, "validation-error")
        assert operator.put("/v1/tenants/acme", json={"max_running": 0}).status_code == 200

    def test_a_huge_map_index_is_a_clean_answer(self, operator):
        operator.create_run()
        resp = operator.get(f"/api/v2/dags/dag/dagRuns/run/taskInstances/t/{10**23}")
        assert resp.status_code in (404, 422)
        resp = operator.get("/api/v2/dags/dag/dagRuns/run/taskInstances/t/tries", params={"map_index": 10**23})
        assert resp.status_code == 422 and isinstance(resp.json()["detail"], list), resp.text

    def test_a_huge_exit_code_is_422(self, operator):
        execution = operator.admission("s").json()
        resp = operator.patch(f"/v1/executions/{execution['execution_id']}", json={
            "observation": {"phase": "Failed", "exit_code": 10**30, "observed_at": "2026-01-01T00:00:00Z"}})
        assert resp.status_code == 422
        assert operator.get(f"/v1/executions/{execution['execution_id']}").json()["observation"] is None


class TestObservationReason:
    def test_an_outcome_reason_longer_than_an_attempt_reason_is_422(self, operator):
        run = operator.create_run()
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        resp = operator.post("/v1/observations", json={
            "ti_id": attempt.ti_id, "try_number": 1, "attempt_epoch": attempt.epoch, "phase": "Failed",
            "reason": "x" * 100, "outcome": "failed"})
        assert resp.status_code == 422
        ti = operator.get(f"/v1/task-instances/{run['task_instances'][0]['ti_id']}").json()
        assert ti["state"] == "running"


class TestNul:
    def test_a_nul_in_the_path_or_query_is_422_on_both_databases(self, operator):
        assert operator.get("/v1/runs", params={"dag_id": "a\x00b"}).status_code == 422
        assert operator.get("/v1/runs/a%00b/r").status_code == 422

    def test_the_airflow_routes_refuse_it_in_their_versions_shape(self, operator):
        operator.create_run()
        v2 = operator.get("/api/v2/dags/dag/dagRuns/run/taskInstances/t/tries", params={"map_index": "a\x00"})
        assert v2.status_code == 422 and isinstance(v2.json()["detail"], list), v2.text
        assert {"loc", "msg", "type"} <= set(v2.json()["detail"][0])
        v1 = operator.get("/api/v1/dags/dag/dagRuns/run/taskInstances/t/tries", params={"x": "a\x00"})
        assert (v1.status_code, v1.json()["title"]) == (400, "Bad Request"), v1.text

    def test_a_nul_in_task_output_is_kept_in_the_log(self, operator):
        operator.create_run()
        resp = Worker(operator).claim_one().send_log(0, "before\x00after\n")
        assert resp.json() == {"size": 13}
        ti = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        assert operator.get(f"/v1/task-instances/{ti}/tries/1/log").text.endswith("before\x00after\n")


def raw_exchange(url: str, head: str, chunks: list[bytes]) -> bytes:
    """Send a request head and then `chunks` on a plain socket, reading what the server answers
    meanwhile; answers the response's first line. Answers as soon as the server does, which
    httpx cannot: it writes a whole body before it reads."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        def write() -> None:
            try:
                sock.sendall(head.encode())
                for chunk in chunks:
                    sock.sendall(chunk)
            except OSError:
                pass  # the server answered and closed: what it sent is still read below

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        answer = b""
        while b"\r\n" not in answer:
            got = sock.recv(4096)
            if not got:
                break
            answer += got
        return answer.split(b"\r\n", 1)[0]


def chunked(size: int, piece: int = 64 * 1024) -> list[bytes]:
    body = (b'{"limit": 1, "pad": "' + b"x" * size + b'"}')
    pieces = [body[n:n + piece] for n in range(0, len(body), piece)]
    return [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces] + [b"0\r\n\r\n"]


class TestBodyLimits:
    def test_an_oversized_body_is_413_before_its_token_is_checked(self, make_client):
        client = make_client(max_request_bytes=4096)
        big = {"username": "admin", "password": "x" * 5000}
        assert_problem(client.post("/auth/token", json=big), 413, "payload-too-large")
        assert_problem(client.post("/v1/dispatch/claim", json={"limit": 1, "pad": "x" * 5000},
                                   headers=bearer("not-a-token")), 413, "payload-too-large")
        assert client.post("/auth/token", json={**big, "password": "x"}).status_code == 401

    def test_an_oversized_body_changes_nothing(self, make_client):
        operator = Operator(make_client(max_request_bytes=4096))
        resp = operator.admission("s1", labels={"pad": "x" * 5000})
        assert_problem(resp, 413, "payload-too-large")
        assert operator.get("/v1/seats/s1/executions").json() == {"items": []}

    def test_a_chunked_body_is_counted_as_it_arrives(self, live_server):
        """No Content-Length to check: the 413 comes once the count passes 1 MiB, while the client
        is still sending. Without a token the route refuses before reading any of it (401)."""
        worker = Worker(Operator(live_server.client())).headers["Authorization"]
        head = ("POST /v1/dispatch/claim HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n")
        assert raw_exchange(live_server.url, f"{head}Authorization: {worker}\r\n\r\n",
                            chunked(8 * 1024 * 1024)).startswith(b"HTTP/1.1 413")
        assert raw_exchange(live_server.url, f"{head}Authorization: {worker}\r\n\r\n",
                            chunked(1000)).startswith(b"HTTP/1.1 422")
        assert raw_exchange(live_server.url, head + "\r\n", chunked(8 * 1024 * 1024)).startswith(b"HTTP/1.1 401")

    def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(self, live_server):
        head = ("POST /auth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {100 * 1024 * 1024}\r\n\r\n")
        assert raw_exchange(live_server.url, head, []).startswith(b"HTTP/1.1 413")

    def test_runs_and_snapshots_carry_more_than_the_default(self, make_client):
        operator = Operator(make_client(max_request_bytes=4096, run_max_request_bytes=65536))
        conf = {"blob": "x" * 20000}
        assert operator.post("/v1/runs", json={"dag_id": "d", "tasks": [task("a")], "conf": conf}).status_code == 201
        too_big = {"dag_id": "d", "tasks": [task("a")], "conf": {"blob": "x" * 70000}}
        assert_problem(operator.post("/v1/runs", json=too_big), 413, "payload-too-large")
        assert operator.get("/v1/admin/snapshot").status_code == 200
        restored = operator.post("/v1/admin/snapshot", json={"format": "fenceline-snapshot/1", "tables": {},
                                                             "pad": "x" * 20000})
        assert restored.status_code != 413


class TestLargeLimitsOnlyForAllowedCallers:
    """Issue 30, item 2: a route's large limit applies only once the headers show a token the
    route accepts; every other body is held to the default before any of it is read."""

    @pytest.fixture
    def small(self, make_client):
        return make_client(max_request_bytes=4096, run_max_request_bytes=65536, snapshot_max_request_bytes=65536,
                           log_max_request_bytes=16384)

    def test_without_a_token_or_with_another_kind_the_default_holds(self, small):
        operator = Operator(small)
        worker_token = Worker(operator).headers
        run = {"dag_id": "d", "tasks": [task("a")], "conf": {"blob": "x" * 20000}}
        snapshot = {"format": "fenceline-snapshot/1", "tables": {}, "pad": "x" * 20000}
        for headers in ({}, bearer("not-a-token"), worker_token):
            for path, body in (("/v1/runs", run), ("/v1/admin/snapshot", snapshot)):
                problem = assert_problem(small.post(path, json=body, headers=headers), 413, "payload-too-large")
                assert "at most 4096 bytes without a valid token" in problem["detail"]
        assert small.post("/v1/runs", json=run, headers=operator.headers).status_code == 201

    def test_a_log_append_carries_more_only_with_its_attempt_token(self, small):
        operator = Operator(small)
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()
        body = {"offset": 0, "content": "x" * 10000}
        assert_problem(small.post("/v1/attempts/logs", json=body, headers=operator.headers), 413,
                       "payload-too-large")
        assert small.post("/v1/attempts/logs", json=body, headers=attempt.headers).status_code == 200

    def test_a_declared_100_mb_snapshot_without_a_token_is_refused_before_its_body(self, live_server):
        head = ("POST /v1/admin/snapshot HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {100 * 1024 * 1024}\r\n\r\n")
        assert raw_exchange(live_server.url, head, []).startswith(b"HTTP/1.1 413")


def nested(depth: int, leaf: object = 1) -> object:
    """`depth` levels of objects around `leaf` (a scalar has depth 0)."""
    value = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


class TestNesting:
    def test_a_thousand_nested_arrays_are_422_not_500(self, client):
        resp = client.post("/auth/token", content=b"[" * 1000 + b"]" * 1000,
                           headers={"content-type": "application/json"})
        assert "nests deeper than 64" in assert_problem(resp, 422, "validation-error")["detail"]

    def test_a_body_deeper_than_64_is_422_and_creates_nothing(self, operator):
        resp = operator.post("/v1/runs", json={"dag_id": "d", "tasks": [task("a")], "conf": nested(300)})
        assert_problem(resp, 422, "validation-error")
        assert operator.get("/v1/runs").json()["items"] == []

    def test_a_conf_deeper_than_32_is_422_naming_it(self, operator):
        resp = operator.post("/v1/runs", json={"dag_id": "d", "tasks": [task("a")], "conf": nested(33)})
        problem = assert_problem(resp, 422, "validation-error")
        assert problem["errors"][0]["loc"] == ["body", "conf"]
        assert operator.get("/v1/runs").json()["items"] == []

    def test_a_run_at_the_limit_exports_and_restores(self, operator, make_client, is_postgres, tmp_path):
        resp = operator.post("/v1/runs", json={"dag_id": "d", "run_id": "deep", "tasks": [task("a")],
                                               "conf": nested(32)})
        assert resp.status_code == 201, resp.text
        exported = operator.get("/v1/admin/snapshot").json()
        with throwaway_database("postgresql" if is_postgres else "sqlite", tmp_path) as url:
            upgrade(url)
            fresh = Operator(make_client(database_url=url))
            assert fresh.post("/v1/admin/snapshot", json=exported).status_code == 201
            assert fresh.get("/v1/admin/snapshot").json() == exported
            assert fresh.run("d", "deep")["conf"] == nested(32)

    def test_a_run_stored_deeper_before_the_limit_still_exports(self, operator, engine):
        operator.create_run(task("a"))
        with engine.begin() as conn:
            conn.execute(insert(DagRun).values(id=uuid.uuid4(), dag_id="d", run_id="old", trace_id="t",
                                               conf=nested(254), created_at=utcnow(), updated_at=utcnow()))
        resp = operator.get("/v1/admin/snapshot")
        assert resp.status_code == 200, resp.text
        (old,) = [r for r in resp.json()["tables"]["dag_runs"] if r["run_id"] == "old"]
        assert old["conf"] == nested(254)


class TestNonFiniteNumbers:
    @pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity"])
    def test_a_non_finite_number_is_422_on_both_databases(self, client, operator, number):
        body = '{"dag_id": "d", "tasks": [{"task_id": "a", "payload": {"command": ["true"]}}], "conf": {"x": %s}}'
        resp = client.post("/v1/runs", content=body % number,
                           headers={**operator.headers, "content-type": "application/json"})
        assert "not" in assert_problem(resp, 422, "validation-error")["detail"]
        assert operator.get("/v1/runs").json()["items"] == []


class TestEncoding:
    def test_a_body_that_is_not_utf8_is_422_problem_json(self, client, operator):
        resp = client.post("/v1/seats/s1/executions", content=b'{"swarm": "\xff"}',
                           headers={**operator.headers, "content-type": "application/json"})
        assert "UTF-8" in assert_problem(resp, 422, "validation-error")["detail"]


@pytest.fixture(scope="module")
def guarded_server(db_url, engine):
    """A live server with `fenceline serve`'s connection layer (app/web/serving.py): heads of at
    most 8 KiB, to be finished within half a second."""
    settings = app_settings(db_url, max_request_head_bytes=8192, request_head_timeout_seconds=0.5)
    app = create_app(settings)
    server = LiveServer(app)
    server.server = ThreadedUvicorn(server_config(app, settings, host="127.0.0.1", port=server.port,
                                                 log_level="warning"))
    server.thread = threading.Thread(target=server.server.run, daemon=True)
    with server:
        yield server


def closed_by_server(url: str, sent: bytes) -> bytes:
    """Send `sent`, then read until the server closes the connection; answers what it sent. A
    server that never closes fails the read's 30 s timeout."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        sock.sendall(sent)
        answer = b""
        while got := sock.recv(65536):
            answer += got
        return answer


class TestRequestHeads:
    """Issue 30, items 3 and 4: a head past the limit is 431 before it is stored; a head not
    finished in time closes its connection."""

    def test_a_head_past_the_limit_is_431_and_closed(self, guarded_server):
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 50_000 + b"\r\n\r\n"
        answer = closed_by_server(guarded_server.url, head)
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert b"application/problem+json" in answer and b"at most 8192 bytes" in answer
        with guarded_server.client() as http:
            assert http.get("/health", headers={"X-Fits": "x" * 4000}).status_code == 200

    def test_a_head_sent_in_small_pieces_is_counted_whole(self, guarded_server):
        parts = urlsplit(guarded_server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            try:
                for _ in range(40):
                    sock.sendall(b"X-Piece: " + b"x" * 500 + b"\r\n")
                    time.sleep(0.001)
            except OSError:
                pass  # refused and closed
            assert sock.recv(65536).startswith(b"HTTP/1.1 431 ")

    def test_each_request_on_a_kept_alive_connection_gets_its_own_bound(self, guarded_server):
        """Three heads of 6 KB in a row on one connection pass an 8 KiB bound: it is per head.
        (Pipelined requests behind a refused head are not answered: the refusal closes.)"""
        fits = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Fits: " + b"x" * 6000 + b"\r\n\r\n"
        parts = urlsplit(guarded_server.url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            for _ in range(3):
                sock.sendall(fits)
                answer = b""
                while not answer.endswith(b"}"):
                    answer += sock.recv(65536)
                assert answer.startswith(b"HTTP/1.1 200 OK")
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"x" * 9000 + b"\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 431 ")

    def test_a_long_request_line_counts_too(self, guarded_server):
        answer = closed_by_server(guarded_server.url, b"GET /health?" + b"q" * 20_000 + b" HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 431 ")

    @pytest.mark.parametrize("sent", [b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ", b""], ids=["partial", "silent"])
    def test_a_head_not_finished_in_time_closes_the_connection(self, guarded_server, sent):
        assert closed_by_server(guarded_server.url, sent) == b""
        with guarded_server.client() as http:
            assert http.get("/health").status_code == 200

    def test_a_body_and_the_next_request_on_the_connection_are_not_heads(self, guarded_server):
        """The bound is on heads: a body past it passes, and keep-alive requests each get their own."""
        operator = Operator(guarded_server.client())
        body = {"dag_id": "d", "tasks": [task("a")], "conf": {"blob": "x" * 20_000}}
        for _ in range(3):
            assert operator.post("/v1/runs", json=body).status_code in (201, 409)

    def test_open_connections_are_a_metric(self, guarded_server):
        operator = Operator(guarded_server.client())
        assert "fenceline_http_connections_open" in operator.get("/metrics").text
