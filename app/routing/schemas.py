"""Wire schemas of pools and tenants, and the names a task routes by."""

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.orchestration.routes import RouteName
from app.web.schemas import Strict

Slots = Annotated[int, Field(ge=0, le=1_000_000, strict=True)]  # strict: `false` is no count


class PoolCreate(Strict):
    name: RouteName
    slots: Slots
    description: Annotated[str, StringConstraints(max_length=1024)] = ""


class PoolPatch(Strict):
    slots: Slots | None = None
    description: Annotated[str, StringConstraints(max_length=1024)] | None = None


class PoolPublic(BaseModel):
    """A pool and its slot use: slots held by task instances queued and running (occupied),
    and by those ready to be claimed (scheduled)."""

    name: str
    slots: int
    description: str
    occupied_slots: int
    queued_slots: int
    running_slots: int
    scheduled_slots: int
    open_slots: int = Field(description="slots - occupied_slots; negative while a shrunk pool drains")


class PoolsPublic(BaseModel):
    items: list[PoolPublic]
    total_entries: int


class TenantCap(Strict):
    max_running: Annotated[int, Field(ge=0, le=1_000_000, strict=True)]


class TenantPublic(BaseModel):
    """A tenant's cap on its task instances in flight (null: none), and how many it has."""

    tenant_id: str
    max_running: int | None
    queued: int
    running: int
