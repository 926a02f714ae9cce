"""Tables of the schema window and the replica registry."""

import uuid
from datetime import datetime

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from app.db.types import UTCDateTime

REVISION_LENGTH = 64


class SchemaWindow(SQLModel, table=True):
    """One row: the revision the schema is at, and the oldest migrations' head a release may
    have and still serve it. Written by every migration run in its own transaction, read by a
    release that does not know the revision (a later release migrated)."""

    __tablename__ = "schema_window"

    revision: str = Field(primary_key=True, max_length=REVISION_LENGTH)
    servable_from: str = Field(max_length=REVISION_LENGTH)
    written_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))


class Replica(SQLModel, table=True):
    """One server process serving the database: what it runs, since when, and when it last said
    so (a heartbeat). It counts as alive for `liveness_seconds` after it was last seen."""

    __tablename__ = "replicas"

    id: uuid.UUID = Field(primary_key=True)
    version: str = Field(max_length=64)
    head: str = Field(max_length=REVISION_LENGTH)  # its migrations' head
    host: str = Field(max_length=255)
    pid: int
    started_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    last_seen_at: datetime = Field(sa_column=Column(UTCDateTime, nullable=False))
    liveness_seconds: int
