"""Helpers for the dashboard tests: logging in through the form, reading pages, driving a run."""

from html.parser import HTMLParser
from typing import Any

from tests.api import ADMIN_PASSWORD, Client, Operator, Worker, task

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
    worker = Worker(operator, seat="etl-worker-1")
    first = worker.claim_one()
    first.report("running")
    first.append_log(0, "loading rows\nnode is going away\n")
    first.report("unexecutable", reason="evicted")
    second = worker.claim_one()
    second.report("running")
    second.append_log(0, "loading rows again\ndone\n")
    second.report("success")
    return first.ti_id, [first.epoch, second.epoch]
