"""Helpers for the dashboard tests: logging in through the form, reading pages, driving a run,
and the headless Chromium that the browser test and tests/support/screenshots.py drive."""

import shutil
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.support.api import ADMIN_PASSWORD, Attempt, Client, Operator, Worker, task

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")

VOID = {"meta", "link", "input", "br", "hr", "img"}


def ui_login(client: Client, password: str = ADMIN_PASSWORD, **form: str) -> Any:
    """Post the login form as a browser does; the client keeps the cookie it sets."""
    return client.post("/ui/login", data={"username": "admin", "password": password, **form},
                       follow_redirects=False)


class _ByClass(HTMLParser):
    def __init__(self, cls: str) -> None:
        super().__init__()
        self.cls, self.stack, self.found = cls, [], []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        hit = self.cls in (dict(attrs).get("class") or "").split()
        self.stack.append(len(self.found) if hit else None)
        if hit:
            self.found.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        for index in {i for i in self.stack if i is not None}:
            self.found[index] += data


def texts(html: str, cls: str) -> list[str]:
    """The text of every element of class `cls`, in document order (whitespace collapsed)."""
    parser = _ByClass(cls)
    parser.feed(html)
    return [" ".join(t.split()) for t in parser.found]


def infra_fault_then_success(operator: Operator) -> tuple[str, list[int]]:
    """A run whose task is re-placed after an eviction and then succeeds; answers its ti_id
    and the two attempts' epochs (the re-place and the claim each bump the epoch)."""
    operator.create_run(task("load", max_infra_attempts=3), dag_id="etl", run_id="nightly")
    first, second = evicted_then_success(Worker(operator, seat="etl-worker-1"), "loading rows\nnode is going away\n",
                                         "loading rows again\ndone\n")
    return first.ti_id, [first.epoch, second.epoch]


def evicted_then_success(worker: Worker, first_log: str, second_log: str = "") -> tuple[Attempt, Attempt]:
    """The worker's next claim starts, writes `first_log` and is evicted; the claim of its
    re-place starts, writes `second_log` and succeeds. Answers both attempts."""
    first = worker.claim_one()
    first.report("running")
    first.append_log(0, first_log)
    first.report("unexecutable", reason="evicted")
    second = worker.claim_one()
    second.report("running")
    if second_log:
        second.append_log(0, second_log)
    second.report("success")
    return first, second


@dataclass
class FenceRun:
    """The run `fence_run` made: dag `etl`, run `daily`; the task instances by task id (a mapped
    task's by `task[i]`), and the attempt still running."""

    ti: dict[str, str]
    first: Worker  # etl-worker-1, generation 1: superseded
    second: Worker  # etl-worker-1, generation 2
    load: Attempt  # running on generation 2, with a line of log


def fence_run(operator: Operator) -> FenceRun:
    """A run made by real claims and reports: `extract` is evicted and re-placed, then succeeds;
    `transform` is mapped three ways and its instance 1 fails once (an application failure) and
    succeeds on its retry; then the seat's execution is superseded and `load` runs on the new
    generation; `report` waits for it."""
    run = operator.create_run(
        task("extract", max_infra_attempts=3),
        *(task("transform", "extract", map_index=i, retries=1) for i in range(3)),
        task("load", "transform"), task("report", "load"), dag_id="etl", run_id="daily")
    first = Worker(operator, seat="etl-worker-1")
    evicted_then_success(first, "extracting\nnode is going away\n")
    for attempt in first.claim():
        attempt.report("running")
        if attempt.item["correlation"]["map_index"] == 1:
            attempt.report("failed", reason="exit 1")
        else:
            attempt.report("success")
    retry = first.claim_one()
    retry.report("running")
    retry.report("success")
    second = first.replacement()
    load = second.claim_one()
    load.report("running")
    load.append_log(0, "loading rows\n")
    load.heartbeat()
    ti = {t["task_id"] + (f"[{t['map_index']}]" if t["map_index"] >= 0 else ""): t["ti_id"]
          for t in run["task_instances"]}
    return FenceRun(ti, first, second, load)


def chrome(profile: str, width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """Debian's headless Chromium with its chromedriver given explicitly (nothing is downloaded)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    return driver
