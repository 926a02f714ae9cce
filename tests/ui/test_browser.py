"""The dashboard in a real browser: headless Chromium logs in, opens a run, a task's tries and
a log, the run's graph and timeline, follows a running log and looks at the fleet, and saves a
screenshot of each page under tests/artifacts/ (gitignored).

Skipped only when Debian's chromium and chromium-driver are not installed (.ci/run installs
them). Selenium drives the browser with the chromedriver given explicitly, so nothing is
downloaded.
"""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.support.api import ADMIN_PASSWORD, Operator, Worker, task, ti_ids
from tests.support.pages import CHROMEDRIVER, CHROMIUM, chrome, fence_run, infra_fault_then_success

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver")


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    profile = tempfile.mkdtemp(prefix="fenceline-chromium-")
    driver = chrome(profile)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_an_operator_logs_in_and_follows_a_run_down_to_its_log(browser, live_server, db_url):
    backend = db_url.split(":")[0].split("+")[0]
    with live_server.client() as api:
        operator = Operator(api)
        ti_id, epochs = infra_fault_then_success(operator)
        operator.admit("etl-worker-2", labels={"zone": "b"})
    ARTIFACTS.mkdir(exist_ok=True)
    shots = iter(range(1, 100))

    def shot(name: str) -> None:
        browser.save_screenshot(str(ARTIFACTS / f"ui-{backend}-{next(shots):02d}-{name}.png"))

    wait = WebDriverWait(browser, 20)
    browser.get(f"{live_server.url}/ui/runs")
    wait.until(ec.url_contains("/ui/login"))
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys("not-the-password")
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    assert wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, ".error"))).text == \
        "Invalid username or password."
    shot("login-refused")
    assert browser.get_cookie("fenceline_ui") is None

    browser.find_element(By.NAME, "password").send_keys(ADMIN_PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait.until(ec.url_to_be(f"{live_server.url}/ui/runs"))
    cookie = browser.get_cookie("fenceline_ui")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert browser.execute_script("return document.cookie") == ""  # invisible to scripts
    shot("runs")

    browser.find_element(By.LINK_TEXT, "nightly").click()
    wait.until(ec.url_contains("/ui/runs/etl/nightly"))
    row = browser.find_element(By.CSS_SELECTOR, "tr.ti-row")
    assert "success" in row.text and "1/3" in row.text
    shot("run-grid")

    browser.find_element(By.LINK_TEXT, "load").click()
    wait.until(ec.url_contains(f"/ui/task-instances/{ti_id}"))
    epochs_shown = browser.find_elements(By.CSS_SELECTOR, "li.epoch")
    assert [e.find_element(By.TAG_NAME, "strong").text for e in epochs_shown] == [f"epoch {n}" for n in epochs]
    assert "evicted" in epochs_shown[0].text and "succeeded" in epochs_shown[1].text
    shot("task-instance")

    browser.find_element(By.CSS_SELECTOR, "a.log-link").click()
    wait.until(ec.url_contains("/tries/1/log"))
    system = browser.find_elements(By.CSS_SELECTOR, "pre.log .sysline")
    plain = browser.find_elements(By.CSS_SELECTOR, "pre.log .line:not(.sysline)")
    assert len(system) == 2 and [p.text for p in plain] == [
        "loading rows", "node is going away", "loading rows again", "done"]
    # Set apart as a person sees it: another background and a coloured edge.
    assert system[0].value_of_css_property("background-color") != plain[0].value_of_css_property("background-color")
    assert system[0].value_of_css_property("border-left-style") == "solid"
    shot("log")

    browser.find_element(By.LINK_TEXT, "Full text").click()
    wait.until(ec.url_contains("/log.txt"))
    assert browser.find_element(By.TAG_NAME, "body").text.startswith("::fenceline:: try 1 epoch")
    browser.back()

    browser.find_element(By.LINK_TEXT, "Fleet").click()
    wait.until(ec.url_contains("/ui/seats"))
    assert {a.text for a in browser.find_elements(By.CSS_SELECTOR, "a.seat-link")} == {"etl-worker-1", "etl-worker-2"}
    shot("seats")

    browser.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait.until(ec.url_contains("/ui/login"))
    assert browser.get_cookie("fenceline_ui") is None
    browser.get(f"{live_server.url}/ui/seats")
    wait.until(ec.url_contains("/ui/login?next="))


def log_in(browser: webdriver.Chrome, url: str, wait: WebDriverWait) -> None:
    browser.get(f"{url}/ui/login")
    browser.find_element(By.NAME, "username").send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(ADMIN_PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    wait.until(ec.url_to_be(f"{url}/ui/runs"))


def tooltip(element) -> str:
    return element.find_element(By.TAG_NAME, "title").get_attribute("textContent")


def test_the_fence_views_show_a_re_placed_and_retried_run_and_follow_its_running_log(browser, live_server, db_url):
    backend = db_url.split(":")[0].split("+")[0]
    ARTIFACTS.mkdir(exist_ok=True)

    def shot(name: str) -> None:
        browser.save_screenshot(str(ARTIFACTS / f"ui-{backend}-fence-{name}.png"))

    wait = WebDriverWait(browser, 20)
    with live_server.client() as api:
        run = fence_run(Operator(api))
        log_in(browser, live_server.url, wait)

        browser.find_element(By.LINK_TEXT, "daily").click()
        browser.find_element(By.LINK_TEXT, "Graph").click()
        wait.until(ec.url_contains("view=graph"))
        nodes = {n.get_attribute("data-task"): n for n in browser.find_elements(By.CSS_SELECTOR, "svg.dag g.node")}
        assert sorted(nodes) == ["extract", "load", "report", "transform"]  # one node per task
        details = {t: n.find_element(By.CSS_SELECTOR, "text.detail").text for t, n in nodes.items()}
        assert details == {"extract": "success · try 1 · epoch 3", "transform": "3 success",
                           "load": "running · try 1 · epoch 1", "report": "none · try 1 · epoch 0"}
        fill = {t: n.find_element(By.CSS_SELECTOR, "rect.box").value_of_css_property("fill") for t, n in nodes.items()}
        assert len({fill["extract"], fill["load"], fill["report"]}) == 3 and fill["transform"] == fill["extract"]
        shot("graph")

        browser.find_element(By.LINK_TEXT, "Timeline").click()
        wait.until(ec.url_contains("view=timeline"))

        def bars(task: str) -> list:
            return browser.find_elements(By.CSS_SELECTOR, f'svg.gantt g[data-ti="{run.ti[task]}"] rect.bar')

        replaced = bars("extract")
        assert len(replaced) == 2 and all(b.size["width"] > 0 for b in replaced)  # two bars for the re-placed try
        assert "evicted" in tooltip(replaced[0]) and "etl-worker-1 generation 1" in tooltip(replaced[0])
        assert replaced[0].value_of_css_property("fill") != replaced[1].value_of_css_property("fill")
        assert replaced[0].location["x"] + replaced[0].size["width"] < replaced[1].location["x"]  # the wait between
        retried = browser.find_elements(By.CSS_SELECTOR, f'svg.gantt g[data-ti="{run.ti["transform[1]"]}"] .try-mark')
        assert [tooltip(m) for m in retried] == ["try 2 begins"]
        assert "etl-worker-1 generation 2" in tooltip(bars("load")[0])
        shot("timeline")

        browser.get(f"{live_server.url}/ui/task-instances/{run.ti['load']}/tries/1/log")
        status = browser.find_element(By.ID, "tail-status")
        wait.until(ec.text_to_be_present_in_element((By.ID, "tail-status"), "following new lines"))
        browser.execute_script("window.openedOnce = true")  # gone if the page reloaded
        run.load.append_log(len("loading rows\n"), "appended after the page opened\n")
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "pre.log"), "appended after the page opened"))
        run.load.report("unexecutable", reason="evicted")
        again = run.second.claim_one()
        again.report("running")
        again.append_log(0, "loading rows again\n")
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "pre.log"), "loading rows again"))
        (mark,) = browser.find_elements(By.CSS_SELECTOR, "pre.log .replace")
        assert f"epoch {again.epoch} " in mark.text and "ended (infra: evicted)" in mark.text
        assert status.text == f"re-placed · now following epoch {again.epoch}"
        again.report("success")
        wait.until(ec.text_to_be_present_in_element((By.ID, "tail-status"), "the try ended · success"))
        assert browser.execute_script("return window.openedOnce") is True
        lines = [line.text for line in browser.find_elements(By.CSS_SELECTOR, "pre.log .line:not(.sysline)")]
        assert lines == ["loading rows", "appended after the page opened", "loading rows again"]
        shot("tail")

    browser.find_element(By.LINK_TEXT, "Fleet").click()
    wait.until(ec.url_contains("/ui/seats"))
    (seat,) = browser.find_elements(By.CSS_SELECTOR, "tr.fleet-row")
    assert seat.find_element(By.CSS_SELECTOR, ".generation").text == "gen 2\n1 superseded"
    assert run.second.execution_id[:8] in seat.text
    shot("fleet")
    seat.find_element(By.LINK_TEXT, "1 superseded").click()
    wait.until(ec.url_contains("/ui/seats/etl-worker-1"))
    generations = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "table.grid tbody tr")]
    assert generations[0].startswith(f"2 {run.second.execution_id} current")
    assert generations[1].startswith(f"1 {run.first.execution_id} superseded")


def test_an_operator_takes_every_rail_from_the_dashboard(browser, live_server):
    """Each action, as a person does it in Chromium: the link, the confirmation saying what will
    change, the button, the result; a 409 shown on the page; a forged form refused."""
    wait = WebDriverWait(browser, 20)
    # ChromeDriver may answer "node does not belong to the document" (not "stale") for a node of
    # the page being left: ask again until it says stale.
    leaving = WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,))
    with live_server.client() as api:
        operator = Operator(api)
        run = operator.create_run(task("a", retries=1, max_infra_attempts=3), task("b"), task("c", "b"),
                                  dag_id="etl", run_id="acts")
        worker = Worker(operator, "seat-b")
        attempts = {a.task_id: a for a in worker.claim(10)}  # a and b in flight, c waiting on b
        ids = ti_ids(run)
    log_in(browser, live_server.url, wait)

    def act(link: str, button: str) -> list[str]:
        """Follow the action link, read the confirmation's rows, press its button; answers the rows."""
        browser.find_element(By.CSS_SELECTOR, link).click()
        rows = [r.text for r in wait.until(ec.presence_of_all_elements_located((By.CSS_SELECTOR, "tr.change")))]
        pressed = browser.find_element(By.CSS_SELECTOR, "form.confirm button")
        assert pressed.text == button
        pressed.click()
        leaving.until(ec.staleness_of(pressed))
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "p.result")))
        return rows

    def open_ti(task_id: str) -> None:
        browser.get(f"{live_server.url}/ui/task-instances/{ids[task_id]}")

    open_ti("a")
    rows = act("a.act-replace", "Re-place now")
    assert "infra budget 1 of 3" in rows[0] and f"epoch {attempts['a'].epoch}" in rows[0]
    assert "scheduled" in browser.find_element(By.CSS_SELECTOR, "tr.change").text
    with live_server.client() as api:
        assert attempts["a"].on(api).heartbeat().status_code == 409
    open_ti("a")
    act("a.act-mark-success", "Mark success")
    open_ti("a")
    act("a.act-mark-failed", "Mark failed")
    open_ti("a")
    rows = act("a.act-clear", "Clear")
    assert "a new try (2)" in rows[0]  # re-place and mark spend no try

    browser.get(f"{live_server.url}/ui/runs/etl/acts")  # from the grid
    browser.find_element(By.XPATH, "//tr[contains(@class,'ti-row')][.//a[text()='b']]//a[@class='act-replace']").click()
    stale = browser.current_url
    with live_server.client() as api:  # another operator marks it failed first: nothing is in flight now
        Operator(api).post(f"/v1/task-instances/{ids['b']}/mark", json={"state": "failed"})
    pressed = browser.find_element(By.CSS_SELECTOR, "form.confirm button")
    pressed.click()
    leaving.until(ec.staleness_of(pressed))
    refusal = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ".refusal"))).text
    assert refusal.startswith("Refused (409 task-instance-not-in-flight)")
    assert browser.current_url == stale

    browser.get(f"{live_server.url}/ui/runs/etl/acts")
    rows = act("a.action.danger", "Cancel the run")
    assert any(r.startswith("a") and "skipped" in r for r in rows)
    browser.get(f"{live_server.url}/ui/runs/etl/acts")
    rows = act("a.action", "Clear the run's failed tasks")
    assert {r.split()[0] for r in rows} == {"a", "b", "c"}
    with live_server.client() as api:
        assert Operator(api).run("etl", "acts")["state"] == "running"

    # A form whose token was tampered with is refused, and changes nothing.
    open_ti("b")
    browser.find_element(By.CSS_SELECTOR, "a.act-mark-success").click()
    browser.execute_script("document.querySelector('input[name=csrf]').value = 'forged'")
    browser.find_element(By.XPATH, "//form[@class='confirm']/button").click()
    assert wait.until(ec.text_to_be_present_in_element((By.TAG_NAME, "h1"), "Cross-site request refused"))
    with live_server.client() as api:
        assert Operator(api).ti(ids["b"])["state"] != "success"
