"""Whatever a caller stored, the dashboard shows it as text: nothing it stored runs as markup."""

from datetime import UTC, datetime

from sqlalchemy import Engine, update

from app.orchestration.models import DagRun, TaskInstance
from tests.support.api import Worker, task
from tests.support.pages import texts, ui_login

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>\'"&'
ESCAPED = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&#39;&#34;&amp;"


def _assert_inert(html: str) -> None:
    assert "<script>" not in html and "<img" not in html and "onerror=alert(1)>" not in html


def _store_hostile_ids(operator, engine: Engine) -> str:
    """The API (and a snapshot restore) refuses such ids, but rows stored by an older version
    may hold them: write a hostile task_id and run_id straight into the database. Answers the
    task instance's id."""
    run = operator.create_run(task("t"), dag_id="etl", run_id="r1")
    with engine.begin() as conn:
        conn.execute(update(TaskInstance).values(task_id=HOSTILE, run_id=HOSTILE, upstream_task_ids=[HOSTILE]))
        conn.execute(update(DagRun).values(run_id=HOSTILE, tenant_id=HOSTILE))
    return run["task_instances"][0]["ti_id"]


class TestEscaping:
    def test_a_hostile_task_id_and_run_id_are_shown_as_text(self, client, operator, engine):
        ti_id = _store_hostile_ids(operator, engine)
        ui_login(client)
        for path in ("/ui/runs", f"/ui/task-instances/{ti_id}"):
            html = client.get(path).text
            _assert_inert(html)
            assert ESCAPED in html, path
        html = client.get("/ui/runs").text
        assert texts(html, "run-link") == [HOSTILE]
        link = html.split('class="run-link" href="')[1].split('"')[0]
        assert "<" not in link and "/" not in link.removeprefix("/ui/runs/etl/")  # one encoded path segment
        run_page = client.get(link)
        assert run_page.status_code == 200 and texts(run_page.text, "ti-link") == [HOSTILE]
        _assert_inert(run_page.text)
        ti_page = client.get(f"/ui/task-instances/{ti_id}").text
        assert texts(ti_page, "task-id") == [HOSTILE]
        assert "/taskInstances/%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E" in texts(ti_page, "airflow-url")[0]

    def test_hostile_seat_records_and_observations_are_shown_as_text(self, client, operator):
        execution = operator.admit("etl-worker-1", swarm=HOSTILE, role=HOSTILE, labels={HOSTILE: HOSTILE})
        observation = {"phase": HOSTILE[:64], "reason": HOSTILE, "observed_at": datetime.now(UTC).isoformat()}
        resp = operator.patch(f"/v1/executions/{execution['execution_id']}", json={"observation": observation})
        assert resp.status_code == 200, resp.text
        ui_login(client)
        for path in ("/ui/seats", "/ui/seats/etl-worker-1"):
            html = client.get(path).text
            _assert_inert(html)
            assert html.count(ESCAPED) >= 4, path  # swarm, role, the label's key and value, the reason
            assert texts(html, "label") == [f"{HOSTILE}={HOSTILE}"]

    def test_hostile_log_lines_are_shown_as_text(self, client, operator):
        operator.create_run()
        Worker(operator).claim_one().append_log(0, f"{HOSTILE}\n::fenceline:: </pre><b>fake</b>\n")
        ti_id = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}/tries/1/log").text
        _assert_inert(html)
        assert "</pre><b>" not in html and ESCAPED in html
        assert texts(html, "line")[1] == HOSTILE
