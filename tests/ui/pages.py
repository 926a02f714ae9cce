"""Helpers for the dashboard tests: logging in through the form, reading pages, driving a run."""

from html.parser import HTMLParser
from typing import Any

from tests.conftest import ADMIN_PASSWORD
from tests.factories import Client
from tests.flows import append_log, claim_one, create_run, report, task, worker

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


def infra_fault_then_success(client: Client, operator: dict[str, str]) -> tuple[str, list[int]]:
    """A run whose task is re-placed after an eviction and then succeeds; answers its ti_id
    and the two attempts' epochs (the re-place and the claim each bump the epoch)."""
    create_run(client, operator, dag_id="etl", run_id="nightly", tasks=[task("load", max_infra_attempts=3)])
    headers = worker(client, operator, seat="etl-worker-1")
    first_item, first = claim_one(client, headers)
    report(client, first, "running")
    append_log(client, first, 0, "loading rows\nnode is going away\n")
    report(client, first, "unexecutable", reason="evicted")
    second_item, second = claim_one(client, headers)
    report(client, second, "running")
    append_log(client, second, 0, "loading rows again\ndone\n")
    report(client, second, "success")
    epochs = [item["correlation"]["attempt_epoch"] for item in (first_item, second_item)]
    return first_item["correlation"]["ti_id"], epochs
