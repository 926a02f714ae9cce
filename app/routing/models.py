"""Tables of pools and tenants."""

from datetime import datetime

from sqlalchemy import Column
from sqlmodel import Field, SQLModel

from app.db.types import UTCDateTime

DEFAULT_POOL_SLOTS = 128  # Airflow's default for its default pool (orchestration.routes.DEFAULT_POOL)
NO_TENANT = ""  # the tenant key of runs without a tenant: one more tenant for the claim's turns


class Pool(SQLModel, table=True):
    """A named cap on the slots that task instances in flight (queued or running) may hold."""

    __tablename__ = "pools"

    name: str = Field(primary_key=True, max_length=256)
    slots: int
    description: str = Field(default="", max_length=1024, sa_column_kwargs={"server_default": ""})


class Tenant(SQLModel, table=True):
    """A tenant's optional cap on its task instances in flight, and when a claim last took one
    of its task instances (the claim's turns rotate across tenants by it)."""

    __tablename__ = "tenants"

    tenant_id: str = Field(primary_key=True, max_length=250)
    max_running: int | None = None
    last_claimed_at: datetime | None = Field(default=None, sa_column=Column(UTCDateTime, nullable=True))
