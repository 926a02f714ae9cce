"""The SQL guard (app/fencing/guard.py) on real PostgreSQL and SQLite, through psycopg, sqlite3
and SQLAlchemy: a stale token writes nothing, and of two attempts racing on real connections
the superseded one never has the last word."""

import sqlite3
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from app.fencing import Fence, NoFence, StaleToken, create_fence_table, guarded_write
from app.fencing.guard import advance
from tests.support.concurrency import together
from tests.support.databases import BACKENDS, libpq_url, throwaway_database

RESULTS = "CREATE TABLE results (name VARCHAR(100) PRIMARY KEY, written_by VARCHAR(100) NOT NULL)"
SUPERSEDED, REPLACEMENT = Fence("ti-1", 1), Fence("ti-1", 3)


@pytest.fixture(params=BACKENDS)
def connect(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[[], Any]]:
    """New DB-API connections to a database of the test's own holding the fence and results
    tables (psycopg's or sqlite3's, each driver in its own parameter style)."""
    with throwaway_database(request.param, tmp_path, prefix="fenceline_guard") as url:
        opened: list[Any] = []

        def new() -> Any:
            conn = psycopg.connect(libpq_url(url)) if request.param == "postgresql" else sqlite3.connect(
                url.removeprefix("sqlite:///"), timeout=30, check_same_thread=False)
            opened.append(conn)
            return conn

        conn = new()
        create_fence_table(conn)
        conn.cursor().execute(RESULTS)
        conn.commit()
        new.url = url
        yield new
        for conn in opened:
            conn.close()


def upsert(conn: Any) -> str:
    """The write the guard protects, in the connection's own parameter style."""
    mark = "%s" if isinstance(conn, psycopg.Connection) else "?"
    return (f"INSERT INTO results (name, written_by) VALUES ({mark}, {mark}) "
            "ON CONFLICT (name) DO UPDATE SET written_by = excluded.written_by")


def written_by(conn: Any, name: str = "daily") -> str | None:
    cursor = conn.cursor()
    cursor.execute("SELECT written_by FROM results WHERE name = 'daily'")
    row = cursor.fetchone()
    conn.rollback()
    return row[0] if row else None


class TestGuardedWrite:
    def test_the_first_write_creates_the_fence_and_a_stale_one_writes_nothing(self, connect):
        conn = connect()
        assert guarded_write(conn, upsert(conn), ("daily", "replacement"), fence=REPLACEMENT) == 1
        conn.commit()
        with pytest.raises(StaleToken) as refused:
            guarded_write(conn, upsert(conn), ("daily", "superseded"), fence=SUPERSEDED)
        conn.rollback()
        assert (refused.value.key, refused.value.token, refused.value.stored) == ("ti-1", 1, 3)
        assert written_by(conn) == "replacement"

    def test_an_equal_token_writes_again_and_a_larger_one_moves_the_fence(self, connect):
        conn = connect()
        for fence, who in ((SUPERSEDED, "first"), (SUPERSEDED, "again"), (REPLACEMENT, "later")):
            guarded_write(conn, upsert(conn), ("daily", who), fence=fence)
            conn.commit()
        assert written_by(conn) == "later"
        with pytest.raises(StaleToken):
            advance(conn, SUPERSEDED)
        conn.rollback()

    def test_keys_are_fenced_apart(self, connect):
        conn = connect()
        guarded_write(conn, upsert(conn), ("daily", "b"), fence=Fence("ti-2", 9))
        guarded_write(conn, upsert(conn), ("daily", "a"), fence=Fence("ti-1", 1))
        conn.commit()
        assert written_by(conn) == "a"

    def test_the_fence_comes_from_the_environment(self, connect, monkeypatch):
        conn = connect()
        monkeypatch.setenv("FENCELINE_FENCE_KEY", "ti-1")
        monkeypatch.setenv("FENCELINE_FENCING_TOKEN", "3")
        guarded_write(conn, upsert(conn), ("daily", "from-env"))
        conn.commit()
        monkeypatch.setenv("FENCELINE_FENCING_TOKEN", "2")
        with pytest.raises(StaleToken):
            guarded_write(conn, upsert(conn), ("daily", "stale"))
        conn.rollback()
        monkeypatch.delenv("FENCELINE_FENCE_KEY")
        with pytest.raises(NoFence):
            guarded_write(conn, upsert(conn), ("daily", "nobody"))
        assert written_by(conn) == "from-env"

    def test_an_autocommit_connection_is_refused(self, connect):
        conn = connect()
        if isinstance(conn, psycopg.Connection):
            conn.autocommit = True
        else:
            conn.isolation_level = None
        with pytest.raises(ValueError, match="autocommits"):
            guarded_write(conn, upsert(conn), ("daily", "x"), fence=REPLACEMENT)
        assert written_by(conn) is None

    def test_through_sqlalchemy(self, connect):
        engine = create_engine(connect.url)
        try:
            write = ("INSERT INTO results (name, written_by) VALUES (:name, :who) "
                     "ON CONFLICT (name) DO UPDATE SET written_by = excluded.written_by")
            with engine.begin() as conn:
                guarded_write(conn, write, {"name": "daily", "who": "replacement"}, fence=REPLACEMENT)
            with pytest.raises(StaleToken), engine.begin() as conn:
                guarded_write(conn, write, {"name": "daily", "who": "superseded"}, fence=SUPERSEDED)
            with Session(engine) as session:
                with pytest.raises(StaleToken):
                    guarded_write(session, write, {"name": "daily", "who": "stale session"}, fence=SUPERSEDED)
                session.rollback()
                guarded_write(session, write, {"name": "other", "who": "session"}, fence=REPLACEMENT)
                session.commit()
        finally:
            engine.dispose()
        assert written_by(connect()) == "replacement"


class TestRace:
    ROUNDS = 30

    def test_the_superseded_attempt_never_has_the_last_word(self, connect):
        """Two attempts of one task instance write the same row at once, each on its own
        connection, released together: whichever reaches the fence first, the row ends as the
        replacement wrote it, and the superseded attempt's write is refused whenever it comes
        second."""
        conns = {"superseded": connect(), "replacement": connect()}
        tokens = {"superseded": SUPERSEDED.token, "replacement": REPLACEMENT.token}

        def attempt(who: str, n: int) -> bool:
            conn = conns[who]
            try:
                guarded_write(conn, upsert(conn), (f"row-{n}", who), fence=Fence(f"ti-{n}", tokens[who]))
                conn.commit()
                return True
            except StaleToken:
                conn.rollback()
                return False

        refused = 0
        for n in range(self.ROUNDS):
            landed = together({who: partial(attempt, who, n) for who in conns})
            assert landed["replacement"], "the replacement is never refused"
            refused += not landed["superseded"]
            cursor = conns["replacement"].cursor()
            cursor.execute(f"SELECT written_by FROM results WHERE name = 'row-{n}'")
            assert cursor.fetchone()[0] == "replacement"
            conns["replacement"].rollback()
        print(f"superseded refused in {refused} of {self.ROUNDS} rounds, overwritten in the rest")
