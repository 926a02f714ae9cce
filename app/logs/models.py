"""Tables of the log stores that live in the database, and of retention."""

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Column, ForeignKey, LargeBinary
from sqlmodel import Field, SQLModel

from app.db.types import UTCDateTime


class LogChunk(SQLModel, table=True):
    """One appended chunk of a log stream: bytes [start_offset, end_offset) of `key` in `store`.

    The primary key is the append's compare-and-swap: a chunk only ever starts where the stream
    ended, so of two writers that both saw the stream end at N, exactly one inserts the chunk at N.
    The database store keeps the bytes in `data`; an S3 store keeps them in the bucket object
    `object_name`, and these rows are its chunk index. Logs stay out of snapshots."""

    __tablename__ = "log_chunks"

    store: str = Field(primary_key=True, max_length=512)  # "database" or "s3://bucket/prefix"
    key: str = Field(primary_key=True, max_length=1024)
    start_offset: int = Field(sa_column=Column(BigInteger, primary_key=True))
    end_offset: int = Field(sa_column=Column(BigInteger, nullable=False))
    data: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    object_name: str | None = Field(default=None, max_length=2048)


class LogRemoval(SQLModel, table=True):
    """When retention removed a run's logs, and the end of the run it removed them after: a run
    that was cleared and ended again (a new `ended_at`) is due again. The tries claimed before
    `removed_at` read as removed."""

    __tablename__ = "log_removals"

    dag_run_id: uuid.UUID = Field(
        sa_column=Column(ForeignKey("dag_runs.id", ondelete="CASCADE"), primary_key=True))
    run_ended_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False, index=True))
    removed_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
