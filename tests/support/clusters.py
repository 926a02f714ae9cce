"""PostgreSQL clusters of a test's own. A test that stops, fills, corrupts or cuts off a
database server does it to one of these (initdb in a temporary directory, its own port,
stopped and removed at the end), never to the shared server the rest of the suite uses."""

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import make_url

from app.ops.migrate import upgrade
from tests.support.databases import PG_ADMIN_URL
from tests.support.ports import free_port


def _bindir() -> Path | None:
    """The newest PostgreSQL server binaries on this machine (Debian keeps them by version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_postgres(args: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as the server's own user."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _postgres_owns(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def is_shared_server(admin_url: str) -> bool:
    """Whether `admin_url` names the server the suite shares (same host and port)."""
    url, shared = make_url(admin_url), make_url(PG_ADMIN_URL)
    return (url.host, url.port or 5432) == (shared.host, shared.port or 5432)


class Cluster:
    """A running cluster of the test's own, reached over TCP on 127.0.0.1:`port`."""

    def __init__(self, root: Path, bindir: Path) -> None:
        self.root, self.bindir = root, bindir
        self.data, self.log = root / "data", root / "server.log"
        self.port = 0

    @property
    def admin_url(self) -> str:
        """libpq's URL of the cluster's `postgres` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """SQLAlchemy's URL of one of its databases."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(_as_postgres([str(self.bindir / "pg_ctl"), "-D", str(self.data), *args]),
                              capture_output=True, text=True, timeout=60)

    def start(self) -> None:
        """Start (or start again) on its port; a first start picks a free one, retrying if
        another process takes it meanwhile."""
        for _ in range(5):
            port = self.port or free_port()
            options = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
            done = self._pg_ctl("-l", str(self.log), "-w", "-t", "30", "-o", options, "start")
            if done.returncode == 0:
                self.port = port
                return
            if self.port:
                break
        raise RuntimeError(f"the test's own PostgreSQL cluster did not start: {done.stderr.strip()} "
                           f"{self.log.read_text()[-2000:] if self.log.exists() else ''}")

    def stop(self, mode: str = "fast") -> None:
        """Stop it (`immediate`: as a crash would, without a checkpoint)."""
        self._pg_ctl("-m", mode, "-w", "stop")

    def create_database(self, tablespace_in: Path | None = None) -> str:
        """A new database, its files in `tablespace_in` if given (a directory the server may
        own, typically a small tmpfs to fill); answers its SQLAlchemy URL."""
        assert not is_shared_server(self.admin_url), "a tablespace is only ever made on a cluster of the test's own"
        name = f"fenceline_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            if tablespace_in is None:
                conn.execute(f'CREATE DATABASE "{name}"')
            else:
                _postgres_owns(tablespace_in)
                conn.execute(f"CREATE TABLESPACE {name} LOCATION '{tablespace_in}'")
                conn.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
        return self.url(name)


@contextmanager
def own_cluster() -> Iterator[Cluster]:
    """A new PostgreSQL cluster, started; stopped and removed at the end whatever the test did
    to it. Skips the test where no server binaries are installed."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb) on this machine")
    root = Path(tempfile.mkdtemp(prefix="fenceline-cluster-"))
    _postgres_owns(root)
    cluster = Cluster(root, bindir)
    try:
        made = subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(cluster.data), "-U", "postgres",
                                            "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"]),
                              capture_output=True, text=True, timeout=120)
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed: {made.stderr.strip()}")
        cluster.start()
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def database_on(directory: Path, backend: str) -> Iterator[str]:
    """A migrated database whose files live in `directory` (a small file system a test fills):
    a SQLite file, or a PostgreSQL database in a tablespace there. The tablespace belongs to a
    cluster of the test's own: a server whose tablespace fills up or vanishes may stop
    (PANIC on fsync), and the shared server must never be that server."""
    if backend == "sqlite":
        url = f"sqlite:///{directory / 'fenceline.db'}"
        upgrade(url)
        yield url
        return
    with own_cluster() as cluster:
        url = cluster.create_database(tablespace_in=directory)
        upgrade(url)
        yield url
