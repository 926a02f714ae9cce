"""What the benchmarks share: a real `fenceline serve` on SQLite or a throw-away PostgreSQL
database, and latency statistics. Benchmarks run on demand and print figures; they are not tests.
They stand on the tests' harness (tests/support): its servers, databases, settings and API."""

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support.api import ADMIN_PASSWORD, Operator, bearer  # noqa: F401 (the bench modules take it from here)
from tests.support.databases import libpq_url, throwaway_database
from tests.support.servers import Served
from tests.support.settings import served_env

# The server as the benchmarks start it: the checkout's code, whatever is installed.
APP_CLI = [sys.executable, "-m", "app.cli"]


@contextlib.contextmanager
def database(backend: str) -> Iterator[str | None]:
    """None for the SQLite default under the data directory, else a throw-away PostgreSQL
    database's URL (tests.support.databases), as libpq takes it."""
    if backend == "sqlite":
        yield None
        return
    with throwaway_database("postgresql", prefix="fenceline_bench") as url:
        yield libpq_url(url)


class Server:
    """`fenceline serve` in a subprocess (tests.support.servers.Served), on a temp data dir and
    a free port."""

    def __init__(self, backend: str, *serve_args: str, **settings: str) -> None:
        self.backend, self.serve_args, self.settings = backend, serve_args, settings

    def __enter__(self) -> "Server":
        self._stack = contextlib.ExitStack()
        data_dir = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="fenceline-bench-")))
        url = self._stack.enter_context(database(self.backend))
        self.database_url = url  # None: SQLite under the data dir
        env = {**os.environ, "FENCELINE_DATA_DIR": str(data_dir), **served_env(**self.settings)}
        env.pop("DATABASE_URL", None)
        if url:
            env["FENCELINE_DATABASE_URL"] = url
        self.served = Served(None, env, "--log-level", "warning", *self.serve_args, command=APP_CLI)
        self._stack.callback(self.served.stop)
        self.process, self.url = self.served.process, self.served.url
        try:
            self.served.wait_healthy(200)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def pids(self) -> list[int]:
        """The server process and its children (the worker processes of `--workers N`)."""
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            children = []
        return [self.process.pid, *map(int, children)]

    def cpu_seconds(self) -> float:
        """User and system CPU the server's processes have used so far, from /proc."""
        total = 0.0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                total += cpu_seconds(pid)
        return total

    def rss_bytes(self) -> int:
        """The server process's resident memory now."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)

    @contextlib.contextmanager
    def peak_rss(self) -> Iterator[list[int]]:
        """The server's resident memory [before, peak] while the block runs (sampled every 10 ms)."""
        figures, stop = [self.rss_bytes(), 0], threading.Event()

        def sample() -> None:
            while not stop.is_set():
                figures[1] = max(figures[1], self.rss_bytes())
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            yield figures
        finally:
            stop.set()
            sampler.join()

    def operator(self, client: httpx.Client) -> dict[str, str]:
        """The operator's headers (tests.support.api.Operator)."""
        return Operator(client).headers



def cpu_seconds(pid: int) -> float:
    """User and system CPU process `pid` has used so far, from /proc (OSError once it is gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def postgres_cpu(database: str | None = None) -> dict[int, float]:
    """User and system CPU so far of each PostgreSQL process on this machine, from /proc: every
    one, or only the backends connected to `database` (on a server other sessions use too; its
    shared processes, the WAL writer and the checkpointer, are then left out). A backend's parallel
    workers count with it: their title names the backend's PID, not the database."""
    found, titles = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "postgres":
                continue
            titles[int(entry.name)] = (entry / "cmdline").read_text().replace("\0", " ")
            found[int(entry.name)] = cpu_seconds(int(entry.name))
        except OSError:
            continue
    if database:
        backends = {pid for pid, title in titles.items() if f" {database} " in title}
        workers = {pid for pid, title in titles.items()
                   if (leader := title.partition("parallel worker for PID ")[2].split()) and int(leader[0]) in backends}
        found = {pid: cpu for pid, cpu in found.items() if pid in backends | workers}
    return found


class PostgresCpu:
    """The CPU the backends connected to `database` use from start() to stop(), read every
    0.1 s so that a backend that ends meanwhile (a pool's overflow connection) counts up to its
    last reading (one that lives less than that is missed)."""

    def __init__(self, database: str) -> None:
        self.database = database
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> "PostgresCpu":
        self._before = postgres_cpu(self.database)
        self._last = dict(self._before)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self._last.update(postgres_cpu(self.database))

    def stop(self) -> float:
        """The seconds of CPU used since start()."""
        self._stop.set()
        self._thread.join()
        self._last.update(postgres_cpu(self.database))
        return sum(cpu - self._before.get(pid, 0.0) for pid, cpu in self._last.items())


def postgres_cpu_seconds() -> float:
    """User and system CPU of every PostgreSQL process on this machine so far (the benchmarks'
    database is the only busy one while they run), from /proc."""
    return sum(postgres_cpu().values())


def admit(client: httpx.Client, operator: dict[str, str], seat: str) -> dict[str, str]:
    """The headers of a worker admitted to `seat` in the bench's swarm (tests.support.api's
    admission, with the operator's headers `operator`)."""
    token = operator["Authorization"].removeprefix("Bearer ")
    return bearer(Operator(client, token).admit(seat, swarm="bench")["worker_token"])


def concurrent_rate(count: int, seconds: float, work: Callable[[int, float, list[float]], None]) -> list[object]:
    """Run `work(n, deadline, samples)` on `count` threads released together by a barrier, each
    appending one latency per operation until the deadline; answers the row
    [count, operations, per s, p50 ms, p99 ms]. A failed operation fails the benchmark."""
    per_thread: list[list[float]] = [[] for _ in range(count)]
    barrier = threading.Barrier(count + 1)

    def run(n: int) -> None:
        barrier.wait()
        work(n, time.monotonic() + seconds, per_thread[n])

    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(run, n) for n in range(count)]
        barrier.wait()
        start = time.perf_counter()
        for f in futures:
            f.result()
        elapsed = time.perf_counter() - start
    samples = [s for got in per_thread for s in got]
    return [count, len(samples), len(samples) / elapsed, percentile(samples, 0.5) * 1000,
            percentile(samples, 0.99) * 1000]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [[f"{c:.1f}" if isinstance(c, float) else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in cells]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
