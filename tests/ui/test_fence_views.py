"""The views that show the fence: the run graph, the epoch timeline, the live log tail's source,
the fleet and the runs page's charts, each on a run made through the API."""

from typing import Any

from tests.support.api import Worker, task
from tests.support.pages import fence_run, texts, ui_login


def row(html: str, ti_id: str) -> str:
    """One task instance's row of the timeline."""
    return html.split(f'data-ti="{ti_id}"')[1].split("</g>")[0]


def tail(client, ti_id: str, offset: int, try_number: int = 1) -> dict[str, Any]:
    resp = client.get(f"/ui/task-instances/{ti_id}/tries/{try_number}/log/tail", params={"offset": offset})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json", resp.text
    return resp.json()


class TestRunGraph:
    def test_one_node_per_task_with_its_state_try_and_epoch(self, client, operator):
        run = fence_run(operator)
        ui_login(client)
        html = client.get("/ui/runs/etl/daily?view=graph").text
        nodes = dict(zip(texts(html, "name"), texts(html, "detail"), strict=True))
        assert nodes == {"extract": "success · try 1 · epoch 3", "transform ×3": "3 success",
                         "load": "running · try 1 · epoch 1", "report": "none · try 1 · epoch 0"}
        assert html.count('class="edge"') == 3  # extract → transform → load → report
        assert f'href="/ui/task-instances/{run.ti["load"]}"' in html
        assert "<script" not in html and 'style="' not in html  # drawn by the server, coloured by class

    def test_a_mapped_task_shows_the_mix_of_its_instances(self, client, operator):
        operator.create_run(*(task("m", map_index=i) for i in range(3)), task("after", "m"))
        Worker(operator).claim_one().report("running")
        ui_login(client)
        html = client.get("/ui/runs/dag/run?view=graph").text
        assert texts(html, "detail")[1] == "1 running, 2 scheduled"
        assert 'data-task="m" data-state="running"' in html  # coloured by what is moving

    def test_an_edge_that_skips_a_layer_goes_around_the_node_between(self, client, operator):
        operator.create_run(task("a"), task("b", "a"), task("c", "a", "b"))
        ui_login(client)
        html = client.get("/ui/runs/dag/run?view=graph").text
        paths = [p.split('"')[0] for p in html.split('class="edge" d="')[1:]]
        assert len(paths) == 3 and sum(" L" in p for p in paths) == 1  # a → c passes b's layer by a waypoint


class TestTimeline:
    def test_a_re_placed_try_is_two_bars_with_the_seat_and_generation_that_ran_each(self, client, operator):
        run = fence_run(operator)
        ui_login(client)
        html = client.get("/ui/runs/etl/daily?view=timeline").text
        bars = texts(row(html, run.ti["extract"]), "bar")
        assert len(bars) == 2
        assert "try 1 epoch 1 · infrastructure fault (re-placed, same try): evicted" in bars[0]
        assert "try 1 epoch 3 · succeeded" in bars[1]
        assert all("on etl-worker-1 generation 1" in bar for bar in bars)
        assert 'class="bar k-infra"' in row(html, run.ti["extract"])
        assert texts(row(html, run.ti["extract"]), "gap")[0].startswith("waited ")  # the wait before the re-place
        assert "on etl-worker-1 generation 2" in texts(row(html, run.ti["load"]), "bar")[0]
        assert 'class="bar k-live"' in row(html, run.ti["load"])
        assert texts(row(html, run.ti["report"]), "bar") == []
        assert "<script" not in html and 'style="' not in html

    def test_an_application_retry_marks_where_the_new_try_begins(self, client, operator):
        run = fence_run(operator)
        ui_login(client)
        html = row(client.get("/ui/runs/etl/daily?view=timeline").text, run.ti["transform[1]"])
        bars = texts(html, "bar")
        assert "try 1 epoch 1 · application failure (spends the try): exit 1" in bars[0]
        assert "try 2 epoch 3 · succeeded" in bars[1]
        assert texts(html, "try-mark") == ["try 2 begins"] and 'class="gap retry"' in html

    def test_an_operator_clear_shows_as_fenced_off(self, client, operator):
        operator.create_run(task("t"))
        attempt = Worker(operator).claim_one()
        attempt.report("running")
        assert operator.post(f"/v1/task-instances/{attempt.ti_id}/clear").status_code == 200
        ui_login(client)
        html = client.get("/ui/runs/dag/run?view=timeline").text
        assert "fenced off by an operator rail: cleared by an operator" in texts(html, "bar")[0]
        assert 'class="bar k-fenced"' in html


class TestLogTail:
    def test_whole_lines_from_an_offset_then_a_re_place_then_the_outcome(self, client, operator):
        operator.create_run(task("t", max_infra_attempts=3))
        worker = Worker(operator)
        first = worker.claim_one()
        first.append_log(0, "one\ntwo, still being")
        ui_login(client)
        got = tail(client, first.ti_id, 0)
        assert [(line["kind"], line["epoch"]) for line in got["lines"]] == [("system", first.epoch), ("line", None)]
        assert got["lines"][1]["text"] == "one" and got["finished"] is False  # the unfinished line waits
        assert tail(client, first.ti_id, got["next"])["lines"] == []
        first.append_log(len("one\ntwo, still being"), " written\n")
        got = tail(client, first.ti_id, got["next"])
        assert [line["text"] for line in got["lines"]] == ["two, still being written"]

        first.report("unexecutable", reason="evicted")
        second = worker.claim_one()
        second.append_log(0, "::fenceline:: a task printing the prefix is still the task's output\n")
        second.report("success")
        got = tail(client, first.ti_id, got["next"])
        assert [(line["kind"], line["epoch"]) for line in got["lines"]] == [("replace", second.epoch), ("line", None)]
        assert f"re-placed: epoch {first.epoch} ended (infra: evicted)" in got["lines"][0]["text"]
        assert got["finished"] is True and got["state"] == "success"
        assert tail(client, first.ti_id, got["next"]) == {**got, "lines": []}

    def test_the_log_page_loads_the_tail_script_only_while_the_try_runs(self, client, operator):
        operator.create_run(task("t"))
        attempt = Worker(operator).claim_one()
        attempt.append_log(0, "one\n")
        ui_login(client)
        page = f"/ui/task-instances/{attempt.ti_id}/tries/1/log"
        html = client.get(page).text
        assert '<script src="/ui/static/tail.js" defer></script>' in html
        assert '<noscript><meta http-equiv="refresh"' in html  # without scripts it refreshes instead
        size = len(client.get(f"{page}.txt").content)
        assert f'data-next="{size}"' in html
        attempt.report("success")
        html = client.get(page).text
        assert "tail.js" not in html and "refresh" not in html

    def test_an_offset_past_the_end_reads_nothing_and_a_bad_one_is_refused(self, client, operator):
        operator.create_run(task("t"))
        attempt = Worker(operator).claim_one()
        ui_login(client)
        assert tail(client, attempt.ti_id, 10**9)["lines"] == []
        url = f"/ui/task-instances/{attempt.ti_id}/tries/1/log/tail"
        assert client.get(url, params={"offset": -1}).status_code == 404
        assert client.get(f"/ui/task-instances/{attempt.ti_id}/tries/2/log/tail?offset=0").status_code == 404


class TestFleet:
    def test_a_superseded_seat_shows_its_new_generation_and_what_its_attempts_did(self, client, operator):
        run = fence_run(operator)
        ui_login(client)
        html = client.get("/ui/seats").text
        (seat,) = texts(html, "fleet-row")
        assert "etl-worker-1" in seat and run.second.execution_id[:8] in seat
        assert texts(html, "generation") == ["gen 2 1 superseded"]
        assert 'href="/ui/seats/etl-worker-1">1 superseded' in html  # one click to every generation
        assert texts(html, "in-flight") == ["1"] and texts(html, "heartbeat")[0].endswith("s ago")
        assert texts(html, "num") == ["7", "6", "1"]  # claimed, settled, re-placed in the last hour

    def test_attempts_left_on_a_superseded_execution_are_pointed_out(self, make_client, operator):
        operator.create_run(task("t"))
        old = Worker(operator, seat="etl-worker-1")
        old.claim_one().report("running")
        old.replacement()
        client = make_client(agent_lost_after_seconds=0)
        ui_login(client)
        html = client.get("/ui/seats").text
        assert texts(html, "warn") == ["1 on a superseded execution"]
        assert texts(html, "hb-stale")[0].endswith("s ago")  # older than the agent-lost threshold


class TestRoutes:
    def test_the_grid_fleet_and_pools_page_show_queues_pools_and_slot_use(self, client, operator):
        operator.post("/v1/pools", json={"name": "gpus", "slots": 4, "description": "<b>the GPU nodes</b>"})
        operator.create_run(task("train", queue="gpu", pool="gpus", pool_slots=3, priority_weight=9), task("etl"))
        Worker(operator, seat="gpu-worker").claim(5, ["gpu"])[0].report("running")
        ui_login(client)
        grid = client.get("/ui/runs/dag/run").text
        assert (texts(grid, "queue"), texts(grid, "pool"), texts(grid, "priority")) == (
            ["default", "gpu"], ["default_pool", "gpus ×3"], ["1", "9"])
        assert texts(client.get("/ui/seats").text, "routes") == ["gpu / gpus"]
        pools = client.get("/ui/pools").text
        assert texts(pools, "pool-name") == ["default_pool", "gpus"]
        assert texts(pools, "occupied") == ["0", "3"] and texts(pools, "open") == ["128", "1"]
        assert "<b>the GPU nodes</b>" not in pools and "&lt;b&gt;the GPU nodes&lt;/b&gt;" in pools


class TestCharts:
    def test_the_runs_page_counts_attempts_per_minute_by_how_they_ended(self, client, operator):
        fence_run(operator)
        ui_login(client)
        html = client.get("/ui/runs").text
        assert [t.split(" ·")[0] for t in texts(html, "chart")] == [
            "4 succeeded", "1 failed (application)", "1 re-placed (infra fault)"]
        assert texts(html, "k-infra")[0].endswith("UTC: 1 re-placed (infra fault)")  # the minute's tooltip
