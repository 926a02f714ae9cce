"""Real concurrency for race tests: threads released together, each with its own connection."""

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx

T = TypeVar("T")
BARRIER_TIMEOUT = 30


def race(server: Any, workers: list[Callable[[httpx.Client], T]]) -> list[T]:
    """Run each worker in its own thread with its own HTTP client against `server` (or, given
    a list of servers — replicas —, worker i against server i modulo their number), all
    released at once by a barrier; answers their results in order (re-raising any error)."""
    servers = server if isinstance(server, list) else [server]
    barrier = threading.Barrier(len(workers), timeout=BARRIER_TIMEOUT)

    def run(n: int, worker: Callable[[httpx.Client], T]) -> T:
        # Plain HTTP: verify=False skips loading a CA bundle (~50 ms a client).
        with servers[n % len(servers)].client(verify=False) as client:
            client.get("/health").raise_for_status()  # connect before the start line
            barrier.wait()
            return worker(client)

    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(run, n, w) for n, w in enumerate(workers)]
        return [f.result(timeout=BARRIER_TIMEOUT * 4) for f in futures]


def wait_for_lock_waits(engine: Any, count: int = 1, *, unless: Callable[[], bool] = lambda: False) -> int:
    """Until at least `count` PostgreSQL backends of this database wait on a lock (not those of
    another test session's), or `unless()` holds; answers how many wait. Watched from a
    connection of its own (activity is per transaction)."""
    deadline = time.monotonic() + BARRIER_TIMEOUT
    with engine.connect() as watcher:
        while True:
            waiting = watcher.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()").scalar()
            watcher.rollback()
            if waiting >= count or unless():
                return waiting
            assert time.monotonic() < deadline, f"{waiting} backends wait on a lock, never {count}"
            time.sleep(0.01)


def together(calls: dict[str, Callable[[], T]]) -> dict[str, T]:
    """Run each call in its own thread, all released at once by a barrier; answers their
    results by name (re-raising any error)."""
    barrier = threading.Barrier(len(calls), timeout=BARRIER_TIMEOUT)

    def run(call: Callable[[], T]) -> T:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        futures = {name: pool.submit(run, call) for name, call in calls.items()}
        return {name: f.result(timeout=BARRIER_TIMEOUT * 4) for name, f in futures.items()}
