"""Stores whose streams are chunks listed in the database (the log_chunks table).

A stream is the sequence of its chunks in offset order; each chunk starts exactly where the one
before it ended. An append inserts the chunk that starts at the stream's current end, and the
table's primary key (store, key, start_offset) is its compare-and-swap: of two writers that both
saw the stream end at N, exactly one inserts the chunk at N; the other finds it there and is
judged against it (the same bytes: accepted once; different ones: LogConflict). The write joins
the request's transaction, so a refused or failed request leaves no chunk behind.

Subclasses say where a chunk's bytes live: in the row (DatabaseLogStore) or in an object the
row names (S3LogStore).
"""

import copy
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from sqlalchemy import Engine, Row, bindparam, delete, func, literal_column, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlmodel import Session

from app.db.dialect import Dialect, dialect_of
from app.db.engine import reading
from app.db.faults import DatabaseFault, database_fault
from app.db.statements import insert_ignore
from app.logs.models import LogChunk
from app.logs.stores.base import LogConflict, LogGap, LogStoreFull, LogStoreUnavailable

CHUNKS = LogChunk.__table__
_IDENTITY = ["store", "key", "start_offset"]


@contextmanager
def database_faults() -> Iterator[None]:
    """A database fault as the store's own: full, or unavailable (busy, no connection, lost);
    a conflict between writers stays one, for the request's transaction to be run again
    (app/db/retries.py), and any other database error is a bug and stays one."""
    try:
        yield
    except (DBAPIError, PoolTimeoutError) as exc:
        fault = database_fault(exc)
        if fault is None or fault is DatabaseFault.CONFLICT:
            raise
        if fault is DatabaseFault.FULL:
            raise LogStoreFull(fault.detail, "database_full", in_database=True) from exc
        raise LogStoreUnavailable(fault.detail, "database_unavailable", in_database=True) from exc


@cache
def _at_end(dialect: Dialect, columns: tuple[str, ...]) -> Any:
    """INSERT the chunk at :start_offset if the stream ends there now (its last chunk's end, 0
    for a stream not yet begun), ignoring one already there: RETURNING a row only if it wrote.
    Of two writers at one offset, the primary key lets one in."""
    names = [*_IDENTITY, "end_offset", *columns]
    stored = (select(CHUNKS.c.end_offset)
              .where(CHUNKS.c.store == bindparam("store"), CHUNKS.c.key == bindparam("key"))
              .order_by(CHUNKS.c.start_offset.desc()).limit(1).scalar_subquery())
    chunk = (select(*(bindparam(name, type_=CHUNKS.c[name].type) for name in names))
             .where(func.coalesce(stored, 0) == bindparam("start_offset", type_=CHUNKS.c.start_offset.type)))
    return (dialect.insert(CHUNKS).from_select(names, chunk)
            .on_conflict_do_nothing(index_elements=_IDENTITY).returning(literal_column("1")))


class ChunkedLogStore:
    """The LogStore contract over log_chunks rows. Reads that outlive a request (a streamed
    answer) take short read-only connections of their own from `engine`, a page of chunks each;
    a store `within` a session reads in that session's transaction. Its statements are built
    once, with bound values."""

    name: str
    fault_reasons: tuple[str, ...] = ("database_full", "database_unavailable", "probe")
    columns: tuple[str, ...]  # what `_bytes` needs of a row, besides its offsets
    # `_put` only says what the row holds (the bytes live in it): an append may offer a chunk
    # at its offset before it knows where the stream ends (_at_end), losing nothing if refused.
    # Not so where `_put` uploads them (S3): a retry would cost an upload, and its answer the bucket's.
    puts_in_row = False
    page = 16  # chunks per read query

    def __init__(self, name: str, engine: Engine) -> None:
        self.name, self.engine, self.reader = name, engine, reading(engine)
        self._session: Session | None = None
        self._size = (select(CHUNKS.c.end_offset).where(CHUNKS.c.store == self.name, CHUNKS.c.key == bindparam("key"))
                      .order_by(CHUNKS.c.start_offset.desc()).limit(1))
        self._sizes = (select(CHUNKS.c.key, func.max(CHUNKS.c.end_offset))
                       .where(CHUNKS.c.store == self.name, CHUNKS.c.key.in_(bindparam("keys", expanding=True)))
                       .group_by(CHUNKS.c.key))
        chunks = self._select(bindparam("key"))

        def chunks_from(first: bool, bounded: bool) -> Any:
            """A page of chunks from `position` (to `end` when `bounded`): the first page holds
            the chunk `position` falls in; chunks are contiguous, so later ones start at it."""
            query = chunks.where(CHUNKS.c.end_offset > bindparam("position") if first
                                 else CHUNKS.c.start_offset >= bindparam("position"))
            return (query.where(CHUNKS.c.start_offset < bindparam("end")) if bounded else query).limit(self.page)
        self._pages = {(first, bounded): chunks_from(first, bounded)
                       for first in (True, False) for bounded in (True, False)}

    def within(self, session: Session) -> "ChunkedLogStore":
        """This store, reading in `session`'s transaction."""
        bound = copy.copy(self)
        bound._session = session
        return bound

    # --- where a chunk's bytes live -------------------------------------------------------

    def _put(self, key: str, start: int, data: bytes) -> dict[str, Any]:
        """Store a chunk's bytes; answers the row's columns that find them again."""
        raise NotImplementedError

    def _discard(self, values: dict[str, Any]) -> None:
        """Forget bytes `_put` stored for a chunk that lost its race."""

    def _bytes(self, row: Row, lo: int, hi: int) -> Iterator[bytes]:
        """Bytes [lo, hi) of the chunk in `row`, counted from the chunk's start."""
        raise NotImplementedError

    def _erase(self, session: Session, keys: list[str]) -> None:
        """Remove the bytes of these streams kept outside their rows (before the rows go)."""

    # --- the contract -----------------------------------------------------------------------

    def _select(self, key: Any) -> Any:
        cols = [CHUNKS.c.start_offset, CHUNKS.c.end_offset, *(CHUNKS.c[c] for c in self.columns)]
        return (select(*cols).where(CHUNKS.c.store == self.name, CHUNKS.c.key == key)
                .order_by(CHUNKS.c.start_offset))

    def size(self, key: str, *, session: Session) -> int | None:
        with database_faults():
            return session.execute(self._size, {"key": key}).scalar()

    def sizes(self, keys: list[str], *, session: Session) -> dict[str, int | None]:
        with database_faults():
            found = dict(session.execute(self._sizes, {"keys": keys}).all())
        return {key: found.get(key) for key in keys}

    def append(self, key: str, offset: int, data: bytes, *, session: Session) -> int:
        """Insert the chunk at the stream's end; a lost race is judged again against the winner.
        Where the bytes live in the row, an append at the end, the usual case, is one statement:
        the chunk inserted where the stream ends now (_at_end); anything else (a retry, a gap, a
        race lost) is judged on the stored size."""
        if data and self.puts_in_row:
            values = self._put(key, offset, data)
            row = {"store": self.name, "key": key, "start_offset": offset, "end_offset": offset + len(data)}
            with database_faults():
                if session.execute(_at_end(dialect_of(session), self.columns), {**row, **values}).first():
                    return offset + len(data)
            self._discard(values)
        while True:
            stored = self.size(key, session=session) or 0
            if offset > stored:
                raise LogGap(stored)
            overlap = min(stored - offset, len(data))
            if overlap and self._stored(session, key, offset, offset + overlap) != data[:overlap]:
                raise LogConflict(stored)
            fresh = data[stored - offset:]
            if not fresh:
                return stored
            values = self._put(key, stored, fresh)
            row = {"store": self.name, "key": key, "start_offset": stored, "end_offset": stored + len(fresh)}
            with database_faults():
                won = insert_ignore(session, CHUNKS, {**row, **values}, _IDENTITY)
            if won:
                return stored + len(fresh)
            self._discard(values)

    def _stored(self, session: Session, key: str, start: int, end: int) -> bytes:
        """Stored bytes [start, end), read in the writer's transaction (only a retry's overlap)."""
        with database_faults():
            rows = session.execute(self._select(key).where(CHUNKS.c.end_offset > start,
                                                           CHUNKS.c.start_offset < end)).all()
        return b"".join(b"".join(self._bytes(row, max(start, row.start_offset) - row.start_offset,
                                             min(end, row.end_offset) - row.start_offset)) for row in rows)

    def read(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        position, first = start, True
        while end is None or position < end:
            rows = self._page(self._pages[first, end is not None], {"key": key, "position": position, "end": end})
            for row in rows:
                hi = row.end_offset if end is None else min(end, row.end_offset)
                yield from self._bytes(row, position - row.start_offset, hi - row.start_offset)
                position = hi
            if len(rows) < self.page:
                return
            first = False

    def _page(self, statement: Any, params: dict[str, Any]) -> list[Row]:
        with database_faults():
            if self._session is not None:
                return list(self._session.execute(statement, params).all())
            with self.reader.connect() as conn:
                return list(conn.execute(statement, params).all())

    def delete(self, keys: Iterable[str], *, session: Session) -> None:
        keys = list(keys)
        if not keys:
            return
        self._erase(session, keys)
        with database_faults():
            session.execute(delete(CHUNKS).where(CHUNKS.c.store == self.name, CHUNKS.c.key.in_(keys)))

    def keys(self) -> Iterator[str]:
        after = None
        while True:
            query = select(CHUNKS.c.key).where(CHUNKS.c.store == self.name).distinct().order_by(CHUNKS.c.key)
            if after is not None:
                query = query.where(CHUNKS.c.key > after)
            with database_faults(), self.reader.connect() as conn:
                found = conn.execute(query.limit(1000)).scalars().all()
            yield from found
            if len(found) < 1000:
                return
            after = found[-1]

    def probe(self) -> None:
        """Write a probe row, read it back, and roll it back: nothing stays."""
        row = {"store": self.name, "key": f".probe/{uuid.uuid4().hex}", "start_offset": 0}
        with database_faults(), Session(self.engine) as session:
            insert_ignore(session, CHUNKS, {**row, "end_offset": 5, "data": b"probe"}, _IDENTITY)
            found = session.execute(select(CHUNKS.c.data).filter_by(**row)).scalar()
            session.rollback()
        if found != b"probe":
            raise LogStoreUnavailable("the probe row read back different bytes", "probe")
