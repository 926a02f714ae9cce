"""HTTP for pools and tenant caps."""

from typing import Annotated

from fastapi import Path

from app.auth.deps import OperatorDep
from app.orchestration.routes import RouteName
from app.routing import service
from app.routing.schemas import PoolCreate, PoolPatch, PoolPublic, PoolsPublic, TenantCap, TenantPublic
from app.web.deps import SessionDep
from app.web.problems import problems
from app.web.routes import Router

router = Router(prefix="/v1", tags=["routing"], responses=problems(401, 403, 422))
PoolPath = Annotated[RouteName, Path(description="The pool's name, e.g. default_pool.")]
TenantPath = Annotated[str, Path(min_length=1, max_length=250, description="A tenant_id runs name.")]


def pool_public(use: service.PoolUse) -> PoolPublic:
    return PoolPublic(name=use.pool.name, slots=use.pool.slots, description=use.pool.description,
                      occupied_slots=use.occupied, queued_slots=use.queued, running_slots=use.running,
                      scheduled_slots=use.scheduled, open_slots=use.open)


def tenant_public(view: service.TenantView) -> TenantPublic:
    return TenantPublic(tenant_id=view.tenant_id, max_running=view.max_running, queued=view.queued,
                        running=view.running)


@router.get("/pools")
def list_pools(session: SessionDep, _: OperatorDep) -> PoolsPublic:
    """Every pool, by name, with its slot use."""
    uses = service.pool_uses(session=session)
    return PoolsPublic(items=[pool_public(u) for u in uses], total_entries=len(uses))


@router.post("/pools", status_code=201, responses=problems(409))
def create_pool(body: PoolCreate, session: SessionDep, _: OperatorDep) -> PoolPublic:
    service.create_pool(session=session, name=body.name, slots=body.slots, description=body.description)
    return pool_public(service.pool_use(session=session, name=body.name))


@router.get("/pools/{name}", responses=problems(404))
def read_pool(name: PoolPath, session: SessionDep, _: OperatorDep) -> PoolPublic:
    return pool_public(service.pool_use(session=session, name=name))


@router.patch("/pools/{name}", responses=problems(404))
def patch_pool(name: PoolPath, body: PoolPatch, session: SessionDep, _: OperatorDep) -> PoolPublic:
    """Resize or describe a pool. Shrinking never stops running work; it only holds claims
    back until the pool's occupied slots fit."""
    service.update_pool(session=session, name=name, slots=body.slots, description=body.description)
    return pool_public(service.pool_use(session=session, name=name))


@router.delete("/pools/{name}", status_code=204, responses=problems(404, 409))
def delete_pool(name: PoolPath, session: SessionDep, _: OperatorDep) -> None:
    """Remove a pool no unfinished task instance names (never default_pool)."""
    service.delete_pool(session=session, name=name)


@router.get("/tenants/{tenant_id}")
def read_tenant(tenant_id: TenantPath, session: SessionDep, _: OperatorDep) -> TenantPublic:
    return tenant_public(service.tenant(session=session, tenant_id=tenant_id))


@router.put("/tenants/{tenant_id}")
def put_tenant(tenant_id: TenantPath, body: TenantCap, session: SessionDep, _: OperatorDep) -> TenantPublic:
    """Cap the tenant's task instances queued and running."""
    return tenant_public(service.set_tenant_cap(session=session, tenant_id=tenant_id, max_running=body.max_running))


@router.delete("/tenants/{tenant_id}", status_code=204)
def delete_tenant(tenant_id: TenantPath, session: SessionDep, _: OperatorDep) -> None:
    """Remove the tenant's cap (idempotent)."""
    service.remove_tenant_cap(session=session, tenant_id=tenant_id)
