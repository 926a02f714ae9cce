"""The dashboard in a real browser: headless Chromium logs in, opens a run, a task's tries and
a log, and saves a screenshot of each page under tests/artifacts/ (gitignored).

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
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from tests.api import ADMIN_PASSWORD, Operator
from tests.ui.pages import infra_fault_then_success

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver")


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    profile = tempfile.mkdtemp(prefix="fenceline-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
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
