"""Wire schemas of the replica registry."""

import uuid
from datetime import datetime

from pydantic import BaseModel, Field


class ReplicaPublic(BaseModel):
    """One server process serving the database, as it last recorded itself."""

    id: uuid.UUID
    version: str
    head: str = Field(description="the head of its migrations: the newest schema revision its code knows")
    host: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    liveness_seconds: int = Field(description="it counts as alive this long after last_seen_at")
    alive: bool = Field(description="seen within its liveness window")


class ReplicasPublic(BaseModel):
    items: list[ReplicaPublic]
    total_entries: int
