"""The Airflow log routes: pages, tokens, media types, tailing and legacy objects."""

import base64
import json
import threading
import time

import pytest

from tests.support.api import ADMIN_PASSWORD, Operator, Worker

V2 = "/api/v2/dags/dag/dagRuns/run/taskInstances/t/logs/1"
V1 = "/api/v1/dags/dag/dagRuns/run/taskInstances/t/logs/1"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"admin:{ADMIN_PASSWORD}".encode()).decode()}


def _running(operator):
    operator.create_run()
    attempt = Worker(operator).claim_one()
    attempt.report("running")
    return attempt


class TestV2:
    def test_structured_lines_keep_their_fields(self, operator):
        attempt = _running(operator)
        attempt.append_log(0, '{"event": "boom", "level": "error", "timestamp": "2026-01-01T00:00:00Z"}\nplain\n')
        content = operator.get(V2).json()["content"]
        assert content[1] == {"event": "boom", "level": "error", "timestamp": "2026-01-01T00:00:00Z"}
        assert content[2] == {"event": "plain"}
        assert content[0]["logger"] == "fenceline" and content[0]["event"].startswith("::fenceline::")

    def test_a_running_log_has_a_token_and_a_partial_line_waits(self, operator):
        attempt = _running(operator)
        attempt.append_log(0, "one\ntw")
        page = operator.get(V2).json()
        assert [m["event"] for m in page["content"]][1:] == ["one"]
        attempt.append_log(6, "o\n")
        attempt.report("success")
        rest = operator.get(V2, params={"token": page["continuation_token"]}).json()
        assert [m["event"] for m in rest["content"]] == ["two"] and rest["continuation_token"] is None

    def test_ndjson_streams_the_whole_try_with_the_token_in_a_header(self, operator):
        attempt = _running(operator)
        attempt.append_log(0, "a\nb\n")
        resp = operator.get(V2, headers={"Accept": "application/x-ndjson"})
        assert resp.headers["content-type"].startswith("application/x-ndjson")
        assert [line for line in resp.text.splitlines()][1:] == ['{"event": "a"}', '{"event": "b"}']
        assert resp.headers["airflow-continuation-token"]

    @pytest.mark.parametrize("mixed", [False, True], ids=["plain lines", "with JSON and system lines"])
    def test_every_line_is_one_message_whatever_it_holds(self, operator, mixed):
        """Each line is one message, its text exact: quotes, the `", "` that frames messages (in
        a line, or at its end before the next), backslashes (a literal backslash-n too), tabs,
        other scripts, empty lines, with or without JSON lines and system lines among them, and
        a last line without its newline."""
        attempt = _running(operator)
        lines = ['say "hi"', 'a", "b', 'ends in a quote, a comma and a space", ',
                 "C:\\new\\dir", "tab\there", "中文 ünï", "", "\\n as text", "end"]
        if mixed:
            lines[3:3] = ['{"event": "json", "x": 1}', "::fenceline:: not really"]
        offset = attempt.append_log(0, "\n".join(lines) + "\n")["size"]
        attempt.append_log(offset, "no newline")
        expected = [*("json" if line.startswith("{") else line for line in lines), "no newline"]
        running = [m["event"] for m in operator.get(V2).json()["content"]][1:]
        assert running == expected[:-1]  # a running log's partial line waits
        attempt.report("success")
        full = [m["event"] for m in operator.get(V2, params={"full_content": "true"}).json()["content"]][1:]
        ndjson = [json.loads(line)["event"] for line in operator.get(
            V2, headers={"Accept": "application/x-ndjson"}).text.splitlines()][1:]
        assert full == ndjson == expected

    def test_unsupported_accept_is_406_and_a_forged_token_400(self, operator):
        _running(operator)
        assert operator.get(V2, headers={"Accept": "text/html"}).status_code == 406
        resp = operator.get(V2, params={"token": "e30.e30.forged"})
        assert resp.status_code == 400 and "Bad Signature" in resp.json()["detail"]

    def test_a_token_for_another_try_is_refused(self, operator):
        operator.create_run(dag_id="other")
        attempt = _running(operator)
        attempt.append_log(0, "x\n")
        token = operator.get(V2).json()["continuation_token"]
        other = "/api/v2/dags/other/dagRuns/run/taskInstances/t/logs/1"
        assert operator.get(other, params={"token": token}).status_code == 400

    def test_errors_take_airflow_3_shapes(self, client, operator):
        missing = client.get(V2)
        assert (missing.status_code, missing.json()) == (401, {"detail": "Not authenticated"})
        forged = client.get(V2, headers={"Authorization": "Bearer not.a.token"})
        assert (forged.status_code, forged.json()) == (403, {"detail": "Invalid JWT token"})
        resp = operator.get("/api/v2/dags/dag/dagRuns/run/taskInstances/t/logs/1")
        assert resp.status_code == 404 and isinstance(resp.json()["detail"], str)
        resp = operator.get("/api/v2/dags/dag/dagRuns/run/taskInstances/t/logs/x")
        assert resp.status_code == 422 and resp.json()["detail"][0]["loc"] == ["path", "try_number"]

    def test_a_legacy_epoch_zero_object_is_served(self, operator, put):
        operator.create_run()
        put("dag/run/t/-1/1.log", b"from before the fence\n")
        events = [m["event"] for m in operator.get(V2).json()["content"]]
        assert events[-1] == "from before the fence" and events[0].startswith("::fenceline:: try 1 epoch 0")


class TestV1:
    def test_json_content_is_text_and_the_token_always_a_string(self, client, operator):
        attempt = _running(operator)
        attempt.append_log(0, "a\n")
        attempt.report("success")
        body = client.get(V1, headers={**BASIC, "Accept": "application/json"}).json()
        assert body["content"].endswith("a\n") and isinstance(body["continuation_token"], str)
        again = client.get(V1, params={"token": body["continuation_token"]},
                           headers={**BASIC, "Accept": "application/json"})
        assert again.json()["content"] == ""

    def test_any_media_type_gets_text_plain(self, client, operator):
        attempt = _running(operator)
        attempt.append_log(0, "a\n")
        resp = client.get(V1, headers={**BASIC, "Accept": "*/*"})
        assert resp.headers["content-type"].startswith("text/plain") and resp.text.endswith("a\n")

    def test_errors_are_airflow_2_problems_and_basic_is_asked_for(self, client, operator):
        resp = client.get(V1)
        assert resp.status_code == 401 and resp.headers["www-authenticate"].startswith("Basic")
        assert resp.headers["content-type"].startswith("application/problem+json")
        wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:wrong").decode()}
        assert client.get(V1, headers=wrong).status_code == 401
        resp = client.get(V1, headers=BASIC)
        assert resp.status_code == 404 and resp.json()["type"].endswith("NotFound")
        resp = client.get("/api/v1/dags/dag/dagRuns/run/taskInstances/t/logs/x", headers=BASIC)
        assert resp.status_code == 400


class TestTailing:
    def test_a_follower_sees_every_line_exactly_once_while_the_agent_appends(self, live_server):
        with live_server.client() as http:
            operator = Operator(http)
            operator.create_run()
            attempt = Worker(operator).claim_one()
            attempt.report("running")
            expected = [f"line {n:03d} " + "x" * (n % 7) for n in range(150)]
            text = "".join(line + "\n" for line in expected)
            chunks = [text[i:i + 97] for i in range(0, len(text), 97)]  # split lines mid-way
            started = threading.Barrier(2)

            def agent() -> None:
                with live_server.client() as agent_http:
                    agent = attempt.on(agent_http)
                    started.wait()
                    offset = 0
                    for chunk in chunks:
                        offset = agent.append_log(offset, chunk)["size"]
                    agent.report("success")

            writer = threading.Thread(target=agent)
            writer.start()
            started.wait()
            seen, token, deadline = [], None, time.monotonic() + 60
            while time.monotonic() < deadline:
                page = operator.get(V2, params={"token": token} if token else {}).json()
                seen += [m["event"] for m in page["content"] if not m["event"].startswith("::fenceline::")]
                token = page["continuation_token"]
                if token is None:
                    break
                time.sleep(0.005)  # pace the poll loop; correctness does not depend on it
            writer.join(timeout=60)
        assert seen == expected
