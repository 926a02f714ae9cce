"""Airflow 3.3.2's own task-instance list as history grows, measured as bench/growth.py measures
fenceline's (issue 45): one `airflow api-server --workers 1` on its own PostgreSQL database
(`airflow_peer_growth` on 127.0.0.1:5432, created and dropped here), seeded with set-based SQL in
bench/seeding.py's shape (bench/peer_seeding.py) to each size in turn, then p50/p99 of sequential
requests and the CPU per request of the api-server and of the database's backends (from /proc),
with bench/growth.py's own `measure`. Then the database's size per task instance.

Airflow is the peer, not part of fenceline: this needs the peer venv of
../shared/peers/airflow/setup.sh (`$PEER/venv`, PEER defaulting to ${TMPDIR:-/tmp}/fenceline-
airflow-peer), into which it installs psycopg2-binary and asyncpg if missing (Airflow's engines on
PostgreSQL), and keeps its AIRFLOW_HOME in `$PEER/home-growth`. Requests are sent with
`Accept-Encoding: identity`, as fenceline does not compress: Airflow would otherwise gzip every
list (its GZipMiddleware) because httpx offers it.

--with-fenceline measures fenceline too (bench/growth.py's server, seed and lists, its clean left
out), both servers up at once and each size seeded and measured on both before the next, then
prints the ratios Airflow / fenceline.

Run: python -m bench.peer_growth [--sizes 10000,1000000] [--requests 50] [--seconds 20]
[--with-fenceline] [--keep (the database and AIRFLOW_HOME, reused by the next run)].
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import growth, peer_seeding, seeding  # noqa: E402
from bench.common import Server, cpu_seconds, table  # noqa: E402
from tests.support.databases import PG_ADMIN_URL  # noqa: E402
from tests.support.ports import free_port  # noqa: E402
from tests.support.waiting import wait_until_serving  # noqa: E402

PEER = Path(os.environ.get("PEER", Path(os.environ.get("TMPDIR", "/tmp")) / "fenceline-airflow-peer"))
DATABASE = "airflow_peer_growth"
HEADERS = ["task instances", "request", "n", "p50 ms", "p99 ms", "api-server CPU ms/req", "PG CPU ms/req"]
RATIO_HEADERS = ["task instances", "request", "p50 Airflow / fenceline", "server CPU", "PG CPU"]
TI_LIST = growth.TI_LIST
CONFIG = """[core]
dags_folder = {home}/dags
load_examples = False
executor = LocalExecutor
fernet_key = {fernet}
auth_manager = airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
simple_auth_manager_users = admin:admin
simple_auth_manager_passwords_file = {home}/simple_auth_manager_passwords.json

[database]
sql_alchemy_conn = postgresql+psycopg2://{libpq}

[logging]
base_log_folder = {home}/logs

[api]
secret_key = {api_secret}

[api_auth]
jwt_secret = {jwt_secret}
"""


class AirflowPeer:
    """Airflow's api-server on its own database, with the DAGs and the template run in it; has
    bench/common.Server's `database_url` and `cpu_seconds()`, so growth.measure takes it."""

    def __init__(self, keep: bool = False) -> None:
        self.keep, self.home, self.venv = keep, PEER / "home-growth", PEER / "venv"
        base = PG_ADMIN_URL.rsplit("/", 1)[0]
        self.database_url = f"{base}/{DATABASE}"

    def _airflow(self, *args: str) -> None:
        subprocess.run([str(self.venv / "bin" / "airflow"), *args], env=self.env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _python(self, code: str) -> str:
        return subprocess.run([str(self.venv / "bin" / "python"), "-c", code], check=True, text=True,
                              capture_output=True).stdout.strip()

    def _reusable(self) -> bool:
        with psycopg.connect(PG_ADMIN_URL) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone():
                return False
        with psycopg.connect(self.database_url) as conn:
            kept = conn.execute("SELECT to_regclass('fenceline_template_ti')").fetchone()[0]
        return kept is not None and (self.home / "airflow.cfg").exists()

    def _create(self) -> None:
        """The database, AIRFLOW_HOME, `db migrate`, the DAGs serialised."""
        self._drop()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        for folder in ("dags", "logs"):
            (self.home / folder).mkdir(parents=True, exist_ok=True)
        secrets = "import secrets; print(secrets.token_urlsafe({}))"
        (self.home / "airflow.cfg").write_text(CONFIG.format(
            home=self.home, libpq=self.database_url.removeprefix("postgresql://"),
            fernet=self._python("from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"),
            api_secret=self._python(secrets.format(32)), jwt_secret=self._python(secrets.format(64))))
        (self.home / "simple_auth_manager_passwords.json").write_text('{"admin": "admin"}\n')
        (self.home / "dags" / "growth.py").write_text(peer_seeding.DAG_FILE)
        self._airflow("db", "migrate")
        self._airflow("dags", "reserialize")

    def _drop(self) -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        shutil.rmtree(self.home, ignore_errors=True)

    def _start(self) -> None:
        """Create (or reuse a kept) database, start the api-server, log in, make the template run."""
        reused = self._reusable()
        if not reused:
            self._create()
        self.url = f"http://127.0.0.1:{free_port()}"
        log = (self.home / "api-server.log").open("w")
        # Its own session, so that stopping it reaches whatever workers it forked and nothing else.
        self.process = subprocess.Popen(
            [str(self.venv / "bin" / "airflow"), "api-server", "--host", "127.0.0.1", "--port",
             self.url.rsplit(":", 1)[1], "--workers", "1"], env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        wait_until_serving(self.process, f"{self.url}/api/v2/monitor/health", "airflow api-server", 180)
        with self.client() as client:
            self.headers = {"Authorization": "Bearer " + client.post(
                "/auth/token", json={"username": "admin", "password": "admin"}).raise_for_status()
                .json()["access_token"], "Accept-Encoding": "identity"}
            if not reused:  # one real run, made by Airflow, that the seed clones
                client.post("/api/v2/dags/dag_000/dagRuns", headers=self.headers, json={
                    "dag_run_id": peer_seeding.TEMPLATE_RUN, "logical_date": "2024-06-01T00:00:00Z",
                }).raise_for_status()
                peer_seeding.keep_template(self.database_url)

    def __enter__(self) -> "AirflowPeer":
        if not (self.venv / "bin" / "airflow").exists():
            raise SystemExit(f"no Airflow venv at {self.venv}: run ../shared/peers/airflow/setup.sh first")
        try:
            self._python("import psycopg2, asyncpg")
        except subprocess.CalledProcessError:
            subprocess.run([str(self.venv / "bin" / "pip"), "install", "-q", "psycopg2-binary", "asyncpg"], check=True)
        self.env = {**os.environ, "AIRFLOW_HOME": str(self.home)}
        self.process: subprocess.Popen | None = None
        try:
            self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)
        if not self.keep:
            self._drop()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=300)

    def cpu_seconds(self) -> float:
        """User and system CPU of the api-server's session (it and the workers it forked)."""
        total = 0.0
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and os.getsid(int(entry.name)) == self.process.pid:
                    total += cpu_seconds(int(entry.name))
        return total


def read_table(peer: AirflowPeer, client: httpx.Client, size: int, requests: int, seconds: float) -> list[list[object]]:
    """One row per list: [request, n, p50, p99, api-server CPU ms, PG CPU ms], after checking
    that the lists count what was seeded."""
    headers, expected = peer.headers, peer_seeding.expected_totals(size, growth.DAG)
    one_dag = f"/api/v2/dags/{growth.DAG}/dagRuns/~/taskInstances?limit=100"
    totals = {"success": client.get(TI_LIST, headers=headers).raise_for_status().json()["total_entries"],
              "dag": client.get(one_dag, headers=headers).raise_for_status().json()["total_entries"]}
    assert totals == expected, f"Airflow's lists count {totals}, the seed made {expected}"
    total = totals["success"]
    calls = {
        "tries list": f"/api/v2/dags/{growth.DAG}/dagRuns/{growth.RUN_ID}/taskInstances/t3/tries",
        "TI list, state=success, limit 100": TI_LIST,
        f"same, offset {total // 2:,} (half)": f"{TI_LIST}&offset={total // 2}",
        "one DAG's TI list": one_dag,
        "runs list, newest 50 (/api/v2 dagRuns)": "/api/v2/dags/~/dagRuns?limit=50&order_by=-run_after",
    }
    return [[name, *growth.measure(peer, lambda path=path: client.get(path, headers=headers), requests, seconds)]
            for name, path in calls.items()]


def _request(row: list[object]) -> tuple[object, str]:
    """A row's size and request, the offset's figure left out (each side halves its own count)."""
    name = str(row[1])
    return row[0], name.split(" offset ")[0] + (" offset (half)" if " offset " in name else "")


def ratios(airflow: list[list[object]], fenceline: list[list[object]]) -> list[list[object]]:
    """Airflow / fenceline, size by size, for the requests both serve alike: p50, server CPU and
    PostgreSQL CPU per request (the runs lists differ: an API page against a dashboard page)."""
    theirs = {_request(row): row for row in fenceline}
    found = []
    for row in airflow:
        other = theirs.get(_request(row))
        if other is not None and isinstance(row[3], float):
            found.append([row[0], row[1], *(f"{row[i] / other[i]:.1f}" if other[i] else "" for i in (3, 5, 6))])
    return found


def run(sizes: list[int], requests: int, seconds: float, keep: bool,
        with_fenceline: bool) -> tuple[list[list[object]], list[list[object]]]:
    """Airflow's rows and (with_fenceline) fenceline's, in bench/growth.py's shape."""
    airflow_rows: list[list[object]] = []
    fenceline_rows: list[list[object]] = []
    with contextlib.ExitStack() as stack:
        peer = stack.enter_context(AirflowPeer(keep))
        client = stack.enter_context(peer.client())
        if with_fenceline:
            server = stack.enter_context(Server("postgresql", "--workers", "1"))
            fl_client = stack.enter_context(server.client())
            fl_headers = growth.serving(server, fl_client)
        for size in sizes:
            if size < peer_seeding.seeded(peer.database_url):
                raise SystemExit(f"the kept database holds more than {size:,} task instances: run without it")
            start = time.monotonic()
            added = peer_seeding.seed(peer.database_url, size)
            print(f"Airflow: seeded {added:,} task instances in {time.monotonic() - start:.0f} s; load average "
                  f"{os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
            airflow_rows += [[f"{size:,}", *row] for row in read_table(peer, client, size, requests, seconds)]
            airflow_rows.append([f"{size:,}", "database size per task instance (bytes)", "",
                                 peer_seeding.size_per_task_instance(peer.database_url), "", "", ""])
            print(f"Airflow: measured {size:,}; load average {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
            if with_fenceline:
                start = time.monotonic()
                added = seeding.seed(server.database_url, size)
                print(f"fenceline: seeded {added:,} in {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
                fenceline_rows += [[f"{size:,}", *row]
                                   for row in growth.read_table(server, fl_client, fl_headers, requests, seconds)]
                fenceline_rows.append([f"{size:,}", "database size per task instance (bytes)", "",
                                       seeding.size_per_task_instance(server.database_url), "", "", ""])
                print(f"fenceline: measured {size:,}; load average {os.getloadavg()[0]:.1f}", file=sys.stderr,
                      flush=True)
    return airflow_rows, fenceline_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="task instances, comma-separated, ascending")
    parser.add_argument("--requests", type=int, default=50, help="requests per list and size")
    parser.add_argument("--seconds", type=float, default=20, help="at most this long per list (at least 5 requests)")
    parser.add_argument("--with-fenceline", action="store_true", help="measure fenceline too, size by size")
    parser.add_argument("--keep", action="store_true", help=f"keep the database {DATABASE} and AIRFLOW_HOME")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    airflow_rows, fenceline_rows = run(sizes, args.requests, args.seconds, args.keep, args.with_fenceline)
    print("Airflow 3.3.2")
    print(table(HEADERS, airflow_rows))
    if args.with_fenceline:
        print("\nfenceline")
        print(table(growth.HEADERS, fenceline_rows))
        print("\nAirflow / fenceline")
        print(table(RATIO_HEADERS, ratios(airflow_rows, fenceline_rows)))


if __name__ == "__main__":
    main()
