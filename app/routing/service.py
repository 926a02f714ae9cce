"""Pools and tenant caps: their rows, their slot use, and the check a new run's routes pass."""

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import case, delete, func, select, update
from sqlmodel import Session

from app.db.dialect import dialect_of
from app.db.statements import insert_ignore, upsert_columns
from app.errors import AppError, conflict, not_found
from app.orchestration import states
from app.orchestration.events import announce_room
from app.orchestration.models import TaskInstance
from app.orchestration.routes import DEFAULT_POOL
from app.routing import selection
from app.routing.models import Pool, Tenant


@dataclass(frozen=True)
class PoolUse:
    """A pool and the slots its task instances hold, by state."""

    pool: Pool
    queued: int = 0
    running: int = 0
    scheduled: int = 0

    @property
    def occupied(self) -> int:
        return self.queued + self.running

    @property
    def open(self) -> int:
        return self.pool.slots - self.occupied


def _slots_in(state: states.State):
    return func.coalesce(func.sum(case((TaskInstance.state == state, TaskInstance.pool_slots), else_=0)), 0)


def pool_uses(*, session: Session, names: Iterable[str] | None = None) -> list[PoolUse]:
    """Every pool (or those named), by name, with its slot use."""
    pools = select(Pool).order_by(Pool.name)
    if names is not None:
        pools = pools.where(Pool.name.in_(list(names)))
    found = list(session.execute(pools).scalars())
    use = {row.pool: row for row in session.execute(
        select(TaskInstance.pool, _slots_in(states.QUEUED).label("queued"), _slots_in(states.RUNNING).label("running"),
               _slots_in(states.SCHEDULED).label("scheduled"))
        .where(TaskInstance.state.in_((states.SCHEDULED, *states.IN_FLIGHT)),
               TaskInstance.pool.in_([p.name for p in found]))
        .group_by(TaskInstance.pool))}
    return [PoolUse(p, *(int(use[p.name][i]) for i in (1, 2, 3))) if p.name in use else PoolUse(p) for p in found]


def pool_use(*, session: Session, name: str) -> PoolUse:
    """The pool and its slot use; 404 pool-not-found."""
    found = pool_uses(session=session, names=[name])
    if not found:
        raise not_found("pool", f"No pool {name!r}.")
    return found[0]


def create_pool(*, session: Session, name: str, slots: int, description: str) -> Pool:
    """A new pool; 409 pool-exists if the name is taken (the primary key decides a race)."""
    if not insert_ignore(session, Pool, {"name": name, "slots": slots, "description": description}, ["name"]):
        raise conflict("pool-exists", "Pool exists", f"Pool {name!r} exists.")
    return session.get(Pool, name, populate_existing=True)


def update_pool(*, session: Session, name: str, slots: int | None, description: str | None) -> Pool:
    """New slots and/or description. Shrinking never touches work in flight: it only stops
    claims until the pool's occupied slots fall below its new size."""
    values = {k: v for k, v in (("slots", slots), ("description", description)) if v is not None}
    if values:
        changed = session.execute(update(Pool).where(Pool.name == name).values(**values).returning(Pool.name)).first()
    else:
        changed = session.get(Pool, name)
    if changed is None:
        raise not_found("pool", f"No pool {name!r}.")
    if slots is not None:  # a grown pool may fit work held back: waiting claims look again
        announce_room(session)
    return session.get(Pool, name, populate_existing=True)


def delete_pool(*, session: Session, name: str) -> None:
    """Remove a pool no unfinished task instance names; 409 pool-in-use otherwise, and always
    for default_pool (every task without a pool names it)."""
    if name == DEFAULT_POOL:
        raise conflict("pool-in-use", "Pool in use", "The default pool cannot be deleted.")
    # Delete first: the row's lock waits for runs naming the pool to commit, so the check
    # below sees their task instances (the refusal rolls the delete back).
    if session.execute(delete(Pool).where(Pool.name == name).returning(Pool.name)).first() is None:
        raise not_found("pool", f"No pool {name!r}.")
    if session.execute(select(TaskInstance.id).where(
            TaskInstance.pool == name, TaskInstance.state.not_in(states.FINISHED)).limit(1)).first():
        raise conflict("pool-in-use", "Pool in use", f"Unfinished task instances name pool {name!r}.")


def check_routes(*, session: Session, wanted: dict[str, int]) -> None:
    """422 unknown-pool if a pool of `wanted` (pool -> the most slots one task asks of it) does
    not exist, 422 pool-too-small if a task asks more slots than its pool has."""
    # FOR KEY SHARE on PostgreSQL: a concurrent DELETE of a pool waits for this run's commit
    # (and then finds its task instances); claims and resizes do not wait for it.
    found = select(Pool.name, Pool.slots).where(Pool.name.in_(list(wanted)))
    found = dialect_of(session).for_update(found, read=True, key_share=True)
    slots = dict(session.execute(found).all())
    if unknown := sorted(wanted.keys() - slots.keys()):
        raise AppError(422, "unknown-pool", "Unknown pool", f"No pool {', '.join(map(repr, unknown))}.")
    if small := sorted(p for p, n in wanted.items() if n > slots[p]):
        raise AppError(422, "pool-too-small", "Pool too small", "Tasks ask more slots than their pool has: "
                       + ", ".join(f"{p!r} has {slots[p]}, a task asks {wanted[p]}" for p in small) + ".")


@dataclass(frozen=True)
class TenantView:
    tenant_id: str
    max_running: int | None
    queued: int
    running: int


def tenant(*, session: Session, tenant_id: str) -> TenantView:
    """The tenant's cap (None: uncapped) and its task instances in flight. Every tenant id
    exists: a tenant is named by its runs."""
    cap = session.execute(select(Tenant.max_running).where(Tenant.tenant_id == tenant_id)).scalar()
    counts = dict(session.execute(
        select(TaskInstance.state, func.count()).where(TaskInstance.tenant_id == tenant_id,
                                                       TaskInstance.state.in_(states.IN_FLIGHT))
        .group_by(TaskInstance.state)).all())
    return TenantView(tenant_id, cap, counts.get(states.QUEUED, 0), counts.get(states.RUNNING, 0))


def set_tenant_cap(*, session: Session, tenant_id: str, max_running: int) -> TenantView:
    """Cap the tenant's task instances in flight. Lowering it below what is in flight stops
    its claims until enough end; nothing running is stopped."""
    selection.lock_all_pools(session)  # claims in flight finish under the caps they saw
    upsert_columns(session, Tenant, {"tenant_id": tenant_id, "max_running": max_running}, ["tenant_id"],
                   ["max_running"])
    announce_room(session)  # a raised cap may fit work held back: waiting claims look again
    return tenant(session=session, tenant_id=tenant_id)


def remove_tenant_cap(*, session: Session, tenant_id: str) -> None:
    """The tenant is uncapped (idempotent)."""
    selection.lock_all_pools(session)  # claims in flight finish under the caps they saw
    if session.execute(update(Tenant).where(Tenant.tenant_id == tenant_id, Tenant.max_running.is_not(None))
                       .values(max_running=None)).rowcount:
        announce_room(session)
