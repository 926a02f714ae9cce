"""Waiting for something to hold, with a deadline: polling what the test can observe."""

import subprocess
import time
from collections.abc import Callable
from typing import Any

import httpx

POLL_SECONDS = 0.05


def wait_until(check: Callable[[], Any], what: str, timeout: float = 20.0, *,
               unless: Callable[[], bool] = lambda: False) -> Any:
    """Poll `check` until it answers something truthy, and answer that; AssertionError naming
    `what` after `timeout` seconds, or as soon as `unless()` holds (it never will, then)."""
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if unless():
            raise AssertionError(f"gave up waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def responds(url: str, status: int | None = 200) -> httpx.Response | None:
    """GET `url`'s response if it answers (with `status`, unless None), else None."""
    try:
        resp = httpx.get(url, timeout=5)
    except httpx.HTTPError:
        return None
    return resp if status is None or resp.status_code == status else None


def wait_until_serving(process: subprocess.Popen, url: str, what: str, timeout: float = 60,
                       status: int | None = 200) -> httpx.Response:
    """GET `url`'s first response (with `status`, unless None) once `process` serves it;
    AssertionError if `process` ends first or `timeout` seconds pass."""
    return wait_until(lambda: responds(url, status), f"{what} to answer {url}", timeout,
                      unless=lambda: process.poll() is not None)
