"""Screenshots of the dashboard's views for docs/dashboard.md: `python -m tests.support.screenshots`.

A real server (uvicorn in this process) on a throw-away SQLite database, the run of
tests/support/pages.py `fence_run` and bench/dashboard.py's run of 200 task instances with 1,000
epochs, both driven through the API, and Debian's headless Chromium. Writes
docs/img/dashboard-*.png (about a minute); run it again after changing a page.
"""

import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

from app.main import create_app
from app.ops.migrate import upgrade
from bench.dashboard import make_run
from tests.support.api import ADMIN_PASSWORD, Operator, kube_target
from tests.support.pages import chrome, fence_run
from tests.support.servers import LiveServer
from tests.support.settings import app_settings

OUT = Path(__file__).resolve().parents[2] / "docs" / "img"
WIDTH = 1400


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fenceline-shots-"))
    url = f"sqlite:///{work / 'fenceline.db'}"
    upgrade(url)
    browser = chrome(str(work / "profile"), WIDTH, 900)
    try:
        app = create_app(app_settings(url, data_dir=work))
        with LiveServer(app) as server, server.client() as api:
            operator = Operator(api)
            run = fence_run(operator)
            wait = WebDriverWait(browser, 20)

            def shot(path: str, name: str, ready: str, most: int = 2400) -> None:
                browser.get(server.url + path)
                wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, ready)))
                height = browser.execute_script("return document.documentElement.scrollHeight")
                browser.set_window_size(WIDTH, min(max(height, 600), most) + 100)
                browser.save_screenshot(str(OUT / f"dashboard-{name}.png"))
                print(OUT / f"dashboard-{name}.png")

            browser.get(f"{server.url}/ui/login")
            browser.find_element(By.NAME, "username").send_keys("admin")
            browser.find_element(By.NAME, "password").send_keys(ADMIN_PASSWORD)
            browser.find_element(By.CSS_SELECTOR, "form.login button").click()
            wait.until(ec.url_contains("/ui/runs"))
            shot("/ui/runs", "runs", ".charts")
            shot("/ui/runs/etl/daily?view=graph", "graph", "svg.dag")
            shot("/ui/runs/etl/daily?view=timeline", "timeline", "svg.gantt")
            browser.get(f"{server.url}/ui/task-instances/{run.ti['load']}/tries/1/log")
            wait.until(ec.text_to_be_present_in_element((By.ID, "tail-status"), "following"))
            run.load.append_log(len("loading rows\n"), "node is going away\n")
            run.load.report("unexecutable", reason="evicted")
            again = run.second.claim_one()
            again.report("running")
            again.append_log(0, "loading rows again\n1200 rows loaded\n")
            wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "pre.log .replace")))
            wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, "pre.log"), "1200 rows loaded"))
            browser.set_window_size(WIDTH, 700)
            browser.save_screenshot(str(OUT / "dashboard-tail.png"))
            print(OUT / "dashboard-tail.png")
            make_run(api, operator.headers)
            pod = operator.admit("etl-pod-1", backend="kubernetes", target=kube_target("6f1c2d3e-pod-uid"))
            operator.patch(f"/v1/executions/{pod['execution_id']}", json={"observation": {
                "phase": "Running", "observed_at": datetime.now(UTC).isoformat()}}).raise_for_status()
            shot("/ui/seats", "fleet", "table.fleet")
            shot("/ui/runs/bench/wide?view=timeline", "timeline-1000-epochs", "svg.gantt", most=1300)
            shot("/ui/runs/bench/wide?view=graph", "graph-200-tasks", "svg.dag", most=1300)
    finally:
        browser.quit()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
