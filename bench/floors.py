"""The floors under a request's server CPU (issue 9, eighth round): what a request costs on this
machine with none of fenceline in it, to read docs/performance.md's figures against. A FastAPI
application of five routes (below), served by uvicorn (httptools, uvloop) in one process,
each route driven at a fixed concurrency against a throw-away PostgreSQL database. Prints
requests/s, p50/p99 and the server's CPU per request (from /proc):

- nothing: an async route that answers a constant (uvicorn, FastAPI, the kernel's sockets);
- ORM session, threadpool: a `def` route, run in FastAPI's threadpool, that runs `SELECT 1`
  and a commit in a SQLAlchemy ORM session, as fenceline's routes run their transactions;
- ORM session, event loop: the same on the event loop, blocking it (not a way to serve: it
  measures the threadpool's share of the row above);
- psycopg, threadpool: `SELECT 1` and a commit on a bare psycopg connection, in the threadpool;
- psycopg async: the same on an async psycopg connection, on the event loop.

    python bench/floors.py [--seconds 8] [--concurrency 8]
"""

import argparse
import asyncio
import contextlib
import os
import queue
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import database, percentile, table  # noqa: E402
from bench.fleet import process_tree_cpu_seconds  # noqa: E402
from bench.reads import hammer  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.waiting import wait_until_serving  # noqa: E402

URL_VARIABLE = "FENCELINE_FLOORS_DATABASE_URL"
ROUTES = {"nothing": "/nothing", "ORM session, threadpool": "/session/threadpool",
          "ORM session, event loop (blocking)": "/session/loop", "psycopg, threadpool": "/psycopg/threadpool",
          "psycopg async": "/psycopg/async"}
HEADERS = ["route", "requests", "per s", "p50 ms", "p99 ms", "server CPU ms / request"]
CONNECTIONS = 16  # each pool's: above any concurrency the bench drives


def floors_app() -> Any:
    """The application uvicorn serves (`--factory`), on the database `URL_VARIABLE` names."""
    import psycopg
    from fastapi import FastAPI
    from sqlalchemy import create_engine, literal_column, select
    from sqlalchemy.orm import Session

    url = os.environ[URL_VARIABLE]
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), pool_size=CONNECTIONS)
    one = select(literal_column("1"))
    bare: queue.Queue[psycopg.Connection[Any]] = queue.Queue()
    bare_async: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        for _ in range(CONNECTIONS):
            bare.put(psycopg.connect(url))
            bare_async.put_nowait(await psycopg.AsyncConnection.connect(url))
        yield

    app = FastAPI(lifespan=lifespan)

    def in_session() -> dict[str, int]:
        with Session(engine) as session:
            answer = session.execute(one).scalar_one()
            session.commit()
        return {"answer": answer}

    def on_bare() -> dict[str, int]:
        conn = bare.get()
        try:
            (answer,) = conn.execute("SELECT 1").fetchone() or (None,)
            conn.commit()
        finally:
            bare.put(conn)
        return {"answer": answer}

    @app.get("/nothing")
    async def nothing() -> dict[str, int]:
        return {"answer": 1}

    @app.get("/session/threadpool")
    def session_threadpool() -> dict[str, int]:
        return in_session()

    @app.get("/session/loop")
    async def session_loop() -> dict[str, int]:
        return in_session()

    @app.get("/psycopg/threadpool")
    def psycopg_threadpool() -> dict[str, int]:
        return on_bare()

    @app.get("/psycopg/async")
    async def psycopg_async() -> dict[str, int]:
        conn = await bare_async.get()
        try:
            cursor = await conn.execute("SELECT 1")
            (answer,) = await cursor.fetchone() or (None,)
            await conn.commit()
        finally:
            bare_async.put_nowait(conn)
        return {"answer": answer}

    return app


@contextlib.contextmanager
def served(url: str) -> Iterator[tuple[str, int]]:
    """uvicorn serving floors_app on `url`'s database: its address and process id."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "bench.floors:floors_app", "--port", str(port),
         "--log-level", "warning"], cwd=ROOT, env={**os.environ, URL_VARIABLE: url})
    address = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(process, address + "/nothing", "the floors application")
        yield address, process.pid
    finally:
        process.terminate()
        process.wait(timeout=20)


def measure(seconds: float, concurrency: int) -> list[list[object]]:
    """A row per route of floors_app."""
    rows: list[list[object]] = []
    with database("postgresql") as url:
        assert url is not None
        with served(url) as (address, pid):
            for name, path in ROUTES.items():
                asyncio.run(hammer(address, "GET", path, {}, concurrency, 1))  # warm up
                cpu = process_tree_cpu_seconds(pid)
                samples, elapsed = asyncio.run(hammer(address, "GET", path, {}, concurrency, seconds))
                cpu = process_tree_cpu_seconds(pid) - cpu
                rows.append([name, len(samples), len(samples) / elapsed, 1000 * percentile(samples, 0.5),
                             1000 * percentile(samples, 0.99), f"{1000 * cpu / max(1, len(samples)):.2f}"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    print(table(HEADERS, measure(args.seconds, args.concurrency)))


if __name__ == "__main__":
    main()
