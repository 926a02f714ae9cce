"""PostgreSQL: the events of every replica's transactions (app/orchestration/events.py), heard
on one LISTENing connection of this process and handed to callbacks (app/execution/hub.py's)."""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import URL

from app.db.dialect import libpq_conninfo
from app.orchestration.events import CHANNEL, Ready

log = logging.getLogger("fenceline.wakeups")
RECONNECT_CAP_SECONDS = 5.0  # back within a few seconds of the database
CONNECT_TIMEOUT_SECONDS = 5  # a database that does not answer at all (a cut network) is tried again


async def listen(url: URL, on_event: Callable[[Ready], None], on_listening: Callable[[bool], None]) -> None:
    """LISTEN on one connection to the database at `url` until cancelled: `on_event(ready)` for
    each notification, `on_listening(True)` once listening (what was heard before may have been
    missed), `on_listening(False)` once the connection is lost. Listens again after any failure,
    with a back-off from 0.5 s doubling up to RECONNECT_CAP_SECONDS."""
    conninfo = libpq_conninfo(url)

    def notified(note: psycopg.Notify) -> None:
        on_event(Ready.parse(note.payload))
    delay = 0.5
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(
                    conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS, keepalives=1,
                    keepalives_idle=30, keepalives_interval=10, keepalives_count=3) as conn:
                # keepalives: a connection dead without a word is lost within a minute
                conn.add_notify_handler(notified)  # also what arrives while LISTEN runs
                await conn.execute(f"LISTEN {CHANNEL}")
                on_listening(True)
                delay = 0.5
                await _hear(conn)
        except (psycopg.Error, OSError) as exc:
            log.warning("wake-up listener lost its connection (%s); reconnecting in %.1fs", exc, delay)
        except Exception:  # a bug must not end the listening for good: say it, and listen again
            log.exception("wake-up listener failed; listening again in %.1fs", delay)
        finally:
            on_listening(False)
        await asyncio.sleep(delay)
        delay = min(RECONNECT_CAP_SECONDS, delay * 2)


async def _hear(conn: psycopg.AsyncConnection[Any]) -> None:
    """Hand the notifications that reach `conn` to its notify handlers until it is lost
    (psycopg's error).

    Read when its socket is readable, not through psycopg's `notifies()`, which wakes ten
    times a second in every process to find nothing. Nothing else uses the connection once it
    listens. The socket is watched only while waiting, as psycopg does: libpq closes it when
    it finds the connection lost."""
    loop, pgconn, fd = asyncio.get_running_loop(), conn.pgconn, conn.fileno()
    handle = pgconn.notify_handler  # psycopg's: decodes, then calls the connection's handlers
    assert handle is not None
    while True:
        pgconn.consume_input()
        while (note := pgconn.notifies()) is not None:
            handle(note)
        readable = loop.create_future()
        loop.add_reader(fd, _settle, readable)
        try:
            await readable
        finally:
            loop.remove_reader(fd)


def _settle(future: "asyncio.Future[None]") -> None:
    if not future.done():
        future.set_result(None)
