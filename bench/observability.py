"""What metrics and logs cost: attempt round trips (claim -> running -> heartbeat -> success)
per second and the server's CPU per round trip (from /proc), against a real server on SQLite
and on a throw-away PostgreSQL database, in four variants of the same application:

- bare: without the request layer (app/telemetry/observe.py: request id, metrics, the access line) and
  without log output: the floor;
- metrics: as served, log lines off (level warning);
- metrics + plain logs: as served, one plain access line per request;
- metrics + json logs: as served with FENCELINE_LOG_FORMAT=json.

The log lines go to /dev/null: formatting and writing them is counted, a terminal is not.

On a loaded machine the round trips vary more between runs than these layers cost, so the
per-request cost is also measured on its own (`per request`): the CPU (thread time) of one
request through the whole ASGI stack to `/health/live` (no database), with and without the
layer and the log line, over many requests in one process. Its difference to `bare` is the
layer's price per request, set beside the server CPU of one request of a round trip.
Run: python bench/observability.py [--seconds 5] [--agents 4] [--backends sqlite,postgresql]."""

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.attempts import agent, create_runs  # noqa: E402
from bench.common import admit, concurrent_rate, cpu_seconds, database, table  # noqa: E402
from tests.support.api import Operator  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.settings import served_env  # noqa: E402
from tests.support.waiting import wait_until_serving  # noqa: E402

VARIANTS = ("bare", "metrics", "metrics + plain logs", "metrics + json logs")


def serve(variant: str, port: int) -> None:
    """The server of one variant (run in a child process)."""
    import uvicorn

    from app.config import get_settings
    from app.main import create_app
    from app.ops.migrate import upgrade
    from app.telemetry import logconfig
    from app.telemetry.observe import Observe

    settings = get_settings()
    upgrade(settings.resolved_database_url)
    app = create_app(settings)
    if variant == "bare":
        app.user_middleware = [m for m in app.user_middleware if m.cls is not Observe]
    log_format = "json" if "json" in variant else "plain"
    level = "info" if "logs" in variant else "warning"
    uvicorn.run(app, host="127.0.0.1", port=port, access_log=False,
                log_config=logconfig.dict_config(log_format, level), log_level=level)


def per_request_us(variant: str, requests: int) -> float:
    """Thread CPU microseconds of one GET /health/live through the application's whole ASGI
    stack, in this process (best of three batches)."""
    import asyncio
    import logging.config

    from app.main import create_app
    from app.telemetry import logconfig
    from app.telemetry.observe import Observe
    from tests.support.settings import app_settings

    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(app_settings(f"sqlite:///{data_dir}/f.db", data_dir=Path(data_dir)))
        if variant == "bare":
            app.user_middleware = [m for m in app.user_middleware if m.cls is not Observe]
        log_format = "json" if "json" in variant else "plain"
        config = logconfig.dict_config(log_format, "info" if "logs" in variant else "warning")
        config["handlers"]["stderr"]["stream"] = open(os.devnull, "w")  # noqa: SIM115  (lives as long as the bench)
        logging.config.dictConfig(config)
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": "/health/live", "raw_path": b"/health/live", "root_path": "", "query_string": b"",
                 "headers": [(b"host", b"bench"), (b"x-request-id", b"bench-1")], "client": ("127.0.0.1", 1),
                 "server": ("bench", 80), "state": {}}

        async def receive() -> dict:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict) -> None:
            pass

        async def batch() -> float:
            start = time.thread_time()
            for _ in range(requests):
                await app(dict(scope, state={}), receive, send)
            return (time.thread_time() - start) / requests * 1e6

        async def best() -> float:
            return min([await batch() for _ in range(3)])

        app.middleware_stack = app.build_middleware_stack()
        result = asyncio.run(best())
        logging.config.dictConfig(logconfig.dict_config("plain", "warning"))
        return result


@contextlib.contextmanager
def server(backend: str, variant: str) -> Iterator[tuple[str, int]]:
    with tempfile.TemporaryDirectory(prefix="fenceline-bench-") as data_dir, database(backend) as url:
        port = free_port()
        env = {**os.environ, "FENCELINE_DATA_DIR": data_dir, **served_env()}
        env.pop("DATABASE_URL", None)
        if url:
            env["FENCELINE_DATABASE_URL"] = url
        process = subprocess.Popen([sys.executable, __file__, "--serve", variant, "--port", str(port)], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(process, base + "/health", f"the {variant} server")
            yield base, process.pid
        finally:
            process.terminate()
            process.wait(timeout=20)


class Client:
    def __init__(self, base: str) -> None:
        self.base = base

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=120)


def measure(backend: str, variant: str, agents: int, seconds: float, tasks: int) -> list[object]:
    with server(backend, variant) as (base, pid), httpx.Client(base_url=base, timeout=120) as client:
        operator = Operator(client).headers
        create_runs(client, operator, tasks)
        workers = [admit(client, operator, f"bench-{n}") for n in range(agents)]
        before = cpu_seconds(pid)
        row = concurrent_rate(agents, seconds, lambda n, deadline, samples: agent(Client(base), workers[n], deadline,
                                                                                 samples))
        cpu = cpu_seconds(pid) - before
    return [backend, variant, row[1], row[2], cpu / max(1, row[1]) * 1000, row[3], row[4]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--requests", type=int, default=5000, help="requests per batch of the per-request figure")
    parser.add_argument("--serve", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    rows = []
    for backend in args.backends.split(","):
        measured = [measure(backend, v, args.agents, args.seconds, args.tasks) for v in VARIANTS]
        floor_rate, floor_cpu = measured[0][3], measured[0][4]
        for row in measured:
            rows.append([*row[:4], f"{row[3] / floor_rate:.2f}", row[4], f"{row[4] / floor_cpu:.2f}", *row[5:]])
    print(table(["db", "variant", "round trips", "per s", "x bare", "server CPU ms/rt", "x bare", "p50 ms",
                 "p99 ms"], rows))
    print("(a round trip: claim, running, heartbeat, success: four requests; CPU from /proc)")
    per_request_ms = min(r[5] for r in rows if r[1] == "bare") / 4
    costs = {v: per_request_us(v, args.requests) for v in VARIANTS}
    print()
    print(table(["per request", "CPU us", "added us", "share of a round-trip request"], [
        [v, costs[v], costs[v] - costs["bare"], f"{(costs[v] - costs['bare']) / (per_request_ms * 10):.1f}%"]
        for v in VARIANTS]))
    print(f"(a round-trip request costs the bare server {per_request_ms:.2f} ms of CPU: the lowest figure above / 4)")


if __name__ == "__main__":
    main()
