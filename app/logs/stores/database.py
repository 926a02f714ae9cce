"""The database store: every chunk's bytes in its log_chunks row (PostgreSQL or SQLite), so
replicas on different machines need nothing but the database they already share."""

from collections.abc import Iterator

from sqlalchemy import Engine, Row

from app.logs.stores.chunked import ChunkedLogStore


class DatabaseLogStore(ChunkedLogStore):
    columns = ("data",)
    puts_in_row = True
    page = 4  # a chunk is at most one append (log_max_request_bytes): a page stays a few MB

    def __init__(self, engine: Engine) -> None:
        super().__init__("database", engine)

    def _put(self, key: str, start: int, data: bytes) -> dict[str, bytes]:
        return {"data": data}

    def _bytes(self, row: Row, lo: int, hi: int) -> Iterator[bytes]:
        data = row.data
        yield data if lo == 0 and hi == len(data) else data[lo:hi]
