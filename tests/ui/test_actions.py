"""The dashboard's actions (contract 12): each rail as a confirmation page saying what will change
and a form that takes it, refused without the session's token or from another site, and a
refusal (409) shown on the page."""

import re

import pytest

from tests.support.api import Worker, assert_stale, task, ti_ids
from tests.support.pages import texts, ui_login


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', html).group(1)


@pytest.fixture
def ui(client):
    ui_login(client)
    return client


def confirm_and_post(ui, path: str) -> tuple[str, object]:
    """Open the confirmation page, then send its form; answers (the confirmation, the answer)."""
    confirm = ui.get(path)
    assert confirm.status_code == 200, confirm.text
    return confirm.text, ui.post(path, data={"csrf": csrf_of(confirm.text)})


class TestRunActions:
    def test_cancel_says_what_it_changes_then_does_it(self, ui, operator):
        run = operator.create_run(task("a"), task("b", "a"), task("c"))
        running = Worker(operator, "seat-x").claim_one()
        running.report("running")
        confirm, done = confirm_and_post(ui, "/ui/act/runs/cancel/dag/run")
        changes = texts(confirm, "change")
        assert len(changes) == 3
        fenced = next(c for c in changes if c.startswith(running.task_id))
        assert "failed" in fenced and f"try 1, epoch {running.epoch}" in fenced
        assert done.status_code == 200 and "Done." in done.text
        assert_stale(running.heartbeat())
        assert operator.run()["state"] == "failed"
        assert {ti["state"] for ti in operator.run()["task_instances"]} == {"failed", "skipped"}
        assert set(ti_ids(run)) == {"a", "b", "c"}

    def test_clear_failed_resumes_a_cancelled_run(self, ui, operator):
        operator.create_run(task("a"), task("b", "a"))
        operator.post("/v1/runs/dag/run/cancel")
        confirm, done = confirm_and_post(ui, "/ui/act/runs/clear-failed/dag/run")
        assert len(texts(confirm, "change")) == 2 and done.status_code == 200
        assert operator.run()["state"] == "running"

    def test_a_run_that_ended_meanwhile_is_a_409_message_on_the_page(self, ui, operator):
        operator.create_run(task("a"))
        confirm = ui.get("/ui/act/runs/cancel/dag/run")
        operator.post("/v1/runs/dag/run/cancel")  # another operator was quicker
        refused = ui.post("/ui/act/runs/cancel/dag/run", data={"csrf": csrf_of(confirm.text)})
        assert refused.status_code == 409 and refused.headers["content-type"].startswith("text/html")
        assert texts(refused.text, "refusal")[0].startswith("Refused (409 run-finished)")


class TestTaskActions:
    @pytest.mark.parametrize(("action", "state"), [("mark-success", "success"), ("mark-failed", "failed"),
                                                   ("clear", "scheduled"), ("replace", "scheduled")])
    def test_each_rail_fences_the_attempt_in_flight(self, ui, operator, action, state):
        run = operator.create_run(task("a", retries=1))
        attempt = Worker(operator).claim_one()
        confirm, done = confirm_and_post(ui, f"/ui/act/task-instances/{ti_ids(run)['a']}/{action}")
        assert "(told to terminate)" in texts(confirm, "change")[0]
        assert done.status_code == 200, done.text
        assert_stale(attempt.heartbeat())
        assert operator.ti(ti_ids(run)["a"])["state"] == state

    def test_re_place_with_nothing_in_flight_is_a_409_message(self, ui, operator):
        run = operator.create_run(task("a"))
        path = f"/ui/act/task-instances/{ti_ids(run)['a']}/replace"
        confirm = ui.get(path)
        assert "Nothing to change" in confirm.text
        token = csrf_of(ui.get(f"/ui/act/task-instances/{ti_ids(run)['a']}/mark-failed").text)
        refused = ui.post(path, data={"csrf": token})
        assert refused.status_code == 409
        assert texts(refused.text, "refusal")[0].startswith("Refused (409 task-instance-not-in-flight)")


class TestForgery:
    def test_a_form_without_the_sessions_token_is_refused_and_changes_nothing(self, ui, operator):
        operator.create_run(task("a"))
        for data in ({}, {"csrf": "0" * 64}):
            refused = ui.post("/ui/act/runs/cancel/dag/run", data=data)
            assert refused.status_code == 403 and "Cross-site request refused" in refused.text
        assert operator.run()["state"] == "running"

    def test_another_sessions_token_is_refused(self, ui, operator, make_client):
        operator.create_run(task("a"))
        other = make_client()
        ui_login(other)
        token = csrf_of(other.get("/ui/act/runs/cancel/dag/run").text)
        assert ui.post("/ui/act/runs/cancel/dag/run", data={"csrf": token}).status_code == 403
        assert operator.run()["state"] == "running"

    def test_a_post_from_another_site_is_refused_even_with_the_token(self, ui, operator):
        operator.create_run(task("a"))
        token = csrf_of(ui.get("/ui/act/runs/cancel/dag/run").text)
        refused = ui.post("/ui/act/runs/cancel/dag/run", data={"csrf": token},
                          headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert refused.status_code == 403 and operator.run()["state"] == "running"


class TestRunsList:
    def test_filters_by_dag_state_and_time_and_searches_by_run_id(self, ui, operator):
        for dag_id, run_id in (("etl", "nightly-1"), ("etl", "Nightly-2"), ("ml", "hourly-1")):
            operator.create_run(task("a"), dag_id=dag_id, run_id=run_id)
        Worker(operator).claim_one().report("success")  # the oldest run succeeds

        def shown(**query: str) -> list[str]:
            resp = ui.get("/ui/runs", params=query)
            assert resp.status_code == 200, resp.text
            return texts(resp.text, "run-link")

        assert shown() == ["hourly-1", "Nightly-2", "nightly-1"]
        assert shown(dag_id="etl") == ["Nightly-2", "nightly-1"]
        assert shown(state="success") == ["nightly-1"]
        assert shown(run_id="NIGHTLY") == ["Nightly-2", "nightly-1"]
        assert shown(run_id="%") == []  # taken literally
        assert shown(created_from="2000-01-01T00:00", created_to="2100-01-01T00:00", dag_id="ml") == ["hourly-1"]
        assert shown(created_from="2100-01-01T00:00") == []
        assert "No run matches" in ui.get("/ui/runs", params={"state": "failed"}).text

    def test_a_bad_filter_is_a_400_page_naming_it(self, ui):
        for query, name in (({"state": "nope"}, "state"), ({"created_from": "yesterday"}, "created_from")):
            resp = ui.get("/ui/runs", params=query)
            assert resp.status_code == 400 and name in resp.text
            assert resp.headers["content-type"].startswith("text/html")


class TestPages:
    def test_unknown_ui_paths_are_an_html_404(self, ui):
        for path in ("/ui/nope", "/ui/act/runs/explode/dag/run", "/ui/runs/x/y/z/../../nope"):
            resp = ui.get(path)
            assert resp.status_code == 404 and resp.headers["content-type"].startswith("text/html"), path

    def test_the_run_page_and_grid_link_every_action(self, ui, operator):
        run = operator.create_run(task("a"))
        Worker(operator).claim_one()
        page = ui.get("/ui/runs/dag/run").text
        for href in ("/ui/act/runs/cancel/dag/run", "/ui/act/runs/clear-failed/dag/run",
                     *(f"/ui/act/task-instances/{ti_ids(run)['a']}/{a}"
                       for a in ("clear", "mark-success", "mark-failed", "replace"))):
            assert f'href="{href}"' in page, href
