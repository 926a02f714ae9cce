"""Each dashboard page shows what the API holds for a run driven through the API."""

from datetime import UTC, datetime

from sqlalchemy import Engine, event

from app.ui import views
from tests.support.api import Worker, task
from tests.support.pages import infra_fault_then_success, texts, ui_login

REFRESH = '<meta http-equiv="refresh"'


class TestRuns:
    def test_the_list_shows_each_run_with_its_task_states(self, client, operator):
        operator.create_run(task("a"), task("b", "a"), dag_id="etl", run_id="r1")
        operator.create_run(dag_id="report", run_id="r2")
        ui_login(client)
        html = client.get("/ui/runs").text
        assert texts(html, "run-link") == ["r2", "r1"]  # newest first
        assert "1 scheduled" in texts(html, "chips")[1] and "1 none" in texts(html, "chips")[1]
        assert REFRESH in html  # runs are still running

    def test_the_list_filters_by_dag(self, client, operator):
        operator.create_run(dag_id="etl", run_id="r1")
        operator.create_run(dag_id="report", run_id="r2")
        ui_login(client)
        assert texts(client.get("/ui/runs?dag_id=etl").text, "run-link") == ["r1"]

    def test_the_list_costs_the_same_statements_however_many_runs_it_shows(self, client, operator):
        """Contract 8: the page reads its runs' task instances in one statement, not run by run."""
        ui_login(client)

        def statements() -> int:
            seen = []
            record = lambda *args: seen.append(args[2])  # noqa: E731  (the statement's text)
            event.listen(Engine, "before_cursor_execute", record)
            try:
                assert client.get("/ui/runs").status_code == 200
            finally:
                event.remove(Engine, "before_cursor_execute", record)
            return len(seen)

        operator.create_run(task("a"), task("b", "a"), dag_id="etl", run_id="r0")
        one = statements()
        for n in range(1, 8):
            operator.create_run(task("a"), task("b", "a"), dag_id="etl", run_id=f"r{n}")
        assert statements() == one

    def test_the_pager_counts_runs_only_so_far_past_the_page(self, client, operator, monkeypatch):
        """The count is bounded (contract 8): past RUNS_COUNTED it says "N+" and still pages on."""
        monkeypatch.setattr(views, "RUNS_PER_PAGE", 1)
        monkeypatch.setattr(views, "RUNS_COUNTED", 2)
        for n in range(4):
            operator.create_run(dag_id="etl", run_id=f"r{n}")
        ui_login(client)
        assert "1–1 of 2+" in client.get("/ui/runs").text and "offset=1" in client.get("/ui/runs").text
        assert "3–3 of 4" in client.get("/ui/runs?offset=2").text

    def test_an_empty_installation_says_so(self, client):
        ui_login(client)
        assert "No runs yet" in client.get("/ui/runs").text


class TestRunGrid:
    def test_the_grid_shows_every_task_with_its_state_try_and_budget(self, client, operator):
        operator.create_run(task("extract", retries=2, max_infra_attempts=4), task("load", "extract"),
                            dag_id="etl", run_id="r1")
        Worker(operator).claim_one().report("running")
        ui_login(client)
        html = client.get("/ui/runs/etl/r1").text
        assert texts(html, "ti-link") == ["extract", "load"]
        rows = texts(html, "ti-row")
        assert "running" in rows[0] and "1 of 3" in rows[0] and "0/4" in rows[0]
        assert "none" in rows[1] and "extract" in rows[1]  # waiting on its upstream
        assert REFRESH in html

    def test_a_finished_run_stops_refreshing(self, client, operator):
        ti_id, _ = infra_fault_then_success(operator)
        ui_login(client)
        html = client.get("/ui/runs/etl/nightly").text
        assert REFRESH not in html and "success" in texts(html, "state")
        assert f"/ui/task-instances/{ti_id}" in html

    def test_an_unknown_run_is_an_html_404(self, client):
        ui_login(client)
        resp = client.get("/ui/runs/nope/nope")
        assert resp.status_code == 404 and resp.headers["content-type"].startswith("text/html")
        assert "Run not found" in resp.text


class TestTaskInstance:
    def test_an_infra_re_place_then_success_shows_two_epochs_and_why_the_first_ended(self, client, operator):
        ti_id, epochs = infra_fault_then_success(operator)
        execution_id = operator.get(f"/v1/task-instances/{ti_id}").json()["execution_id"]
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}").text
        shown = texts(html, "epoch")
        assert len(shown) == 2
        assert shown[0].startswith(f"epoch {epochs[0]} ")
        assert "infrastructure fault (re-placed, same try): evicted" in shown[0]
        assert shown[1].startswith(f"epoch {epochs[1]} ") and "succeeded" in shown[1]
        for epoch in shown:  # which execution ran each: the seat and its generation
            assert "etl-worker-1 generation 1" in epoch and "user code started" in epoch
        assert execution_id[:8] in shown[1]
        assert texts(html, "why") == ["infrastructure fault (re-placed, same try): evicted", "succeeded"]
        budget = texts(html, "budget")[0]
        assert "infra_attempts 1 of max_infra_attempts 3" in budget
        assert "1 infra fault of max_infra_attempts 3" in html
        assert texts(html, "airflow-url") == ["/api/v2/dags/etl/dagRuns/nightly/taskInstances/load/logs/1"]
        assert REFRESH not in html

    def test_an_application_failure_opens_a_second_try(self, client, operator):
        operator.create_run(task("t", retries=1))
        worker = Worker(operator)
        worker.claim_one().report("failed", reason="exit 1")
        worker.claim_one()
        ti_id = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}").text
        assert [t.split(" ·")[0] for t in texts(html, "try")] == ["Try 2", "Try 1"]
        assert texts(html, "why") == ["in flight", "application failure (spends the try): exit 1"]
        assert REFRESH in html

    def test_a_mapped_task_names_its_map_index_in_the_airflow_url(self, client, operator):
        operator.create_run(task("m", map_index=3))
        ti_id = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}").text
        assert texts(html, "airflow-url") == ["/api/v2/dags/dag/dagRuns/run/taskInstances/m/logs/1?map_index=3"]
        assert "Not claimed yet." in html


class TestLog:
    def test_system_lines_are_set_apart_from_the_task_output(self, client, operator):
        ti_id, epochs = infra_fault_then_success(operator)
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}/tries/1/log").text
        lines = texts(html, "line")
        system = texts(html, "sysline")
        log_system = [line for line in lines if line in system]
        assert len(log_system) == 2
        assert f"epoch {epochs[0]} " in log_system[0] and "first attempt" in log_system[0]
        assert f"epoch {epochs[1]} " in log_system[1] and f"epoch {epochs[0]} ended (infra: evicted)" in log_system[1]
        assert [line for line in lines if line not in system] == [
            "loading rows", "node is going away", "loading rows again", "done"]
        assert '<span class="line sysline">::fenceline::' in html
        assert "Showing the last" not in html and REFRESH not in html

    def test_a_huge_log_shows_its_tail_and_links_the_full_text(self, client, operator):
        operator.create_run()
        attempt = Worker(operator).claim_one()
        lines = [f"line {n:06d} " + "x" * 80 for n in range(2000)]  # ~180 KB
        body = "\n".join(lines) + "\n"
        attempt.append_log(0, body)
        ti_id = operator.get("/v1/runs/dag/run").json()["task_instances"][0]["ti_id"]
        ui_login(client)
        html = client.get(f"/ui/task-instances/{ti_id}/tries/1/log").text
        shown = texts(html, "line")
        assert "Showing the last 64 KiB" in html
        assert shown[-1] == lines[-1] and shown[0] in lines  # whole lines only
        assert 600 < len(shown) < 800
        assert texts(html, "sysline")[0].startswith("::fenceline:: try 1 epoch 1")  # the epoch list keeps it
        assert REFRESH in html  # still running
        full = client.get(f"/ui/task-instances/{ti_id}/tries/1/log.txt")
        assert full.status_code == 200 and full.headers["content-type"] == "text/plain; charset=utf-8"
        assert full.text == operator.get(f"/v1/task-instances/{ti_id}/tries/1/log").text
        assert full.text.endswith(body) and full.headers["x-content-type-options"] == "nosniff"

    def test_a_try_that_never_was_is_404(self, client, operator):
        ti_id, _ = infra_fault_then_success(operator)
        ui_login(client)
        assert client.get(f"/ui/task-instances/{ti_id}/tries/2/log").status_code == 404
        assert client.get(f"/ui/task-instances/{ti_id}/tries/2/log.txt").status_code == 404


class TestSeats:
    def test_occupants_show_their_execution_and_last_observation(self, client, operator):
        first = operator.admit("etl-worker-1", labels={"zone": "a"}, role="loader")
        second = operator.admit("etl-worker-1", previous=first["execution_id"], labels={"zone": "a"}, role="loader",
                                backend="kubernetes", target={"pod_namespace": "workers", "pod_name": "etl-1"})
        observation = {"phase": "Failed", "reason": "OOMKilled", "exit_code": 137, "terminal": True,
                       "observed_at": datetime.now(UTC).isoformat()}
        resp = operator.patch(f"/v1/executions/{second['execution_id']}", json={"observation": observation})
        assert resp.status_code == 200, resp.text
        ui_login(client)
        html = client.get("/ui/seats").text
        row = texts(html, "grid")[0]
        assert "etl-worker-1" in row and "loader" in row and "zone=a" in row
        assert second["execution_id"][:8] in row and "pod_name=etl-1" in row
        assert texts(html, "obs") == ["Failed · OOMKilled · exit 137 · terminal"]
        assert REFRESH not in html  # the only occupant is observed terminal

    def test_a_seat_lists_every_generation_newest_first(self, client, operator):
        first = operator.admit("etl-worker-1")
        second = operator.admit("etl-worker-1", previous=first["execution_id"])
        ui_login(client)
        html = client.get("/ui/seats/etl-worker-1").text
        rows = texts(html, "grid")[0]
        assert rows.index(second["execution_id"]) < rows.index(first["execution_id"])
        assert "superseded" in rows and "current" in rows
        assert REFRESH in html  # the current execution is not known to have ended

    def test_an_unknown_seat_is_404(self, client):
        ui_login(client)
        assert client.get("/ui/seats/nobody").status_code == 404
