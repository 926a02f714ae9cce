"""The claim's selection: which ready task instances a claim may take, and in which order.

Rules (docs/behaviour.md, "Routing"):
- a claim takes only work on the queues it serves;
- higher `priority_weight` first; among equal weights, tenants take turns: every tenant's
  oldest ready task before any tenant's second, tenants that waited longest since a claim last
  took their work first (runs without a tenant are one more tenant), then oldest first;
- a tenant with a cap never has more than `max_running` task instances queued or running;
- a pool never has more than `slots` slots queued or running: within a pool, work is taken in
  that order and stops at the first task instance that does not fit, so a large task is not
  starved by smaller ones behind it. A task needing more slots than its pool has waits.

Race-free by construction: in-flight slots are counted from the task instances, never kept
as a counter, by a statement that runs after the claim has locked (PostgreSQL: SELECT … FOR
UPDATE, in name order) every pool it may take from and every capped tenant; SQLite runs one
writer at a time. Only the claim moves a task instance into flight, so no other rail can add
to a pool's count while the lock is held; every rail out of flight only frees slots.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, exists, func, nulls_first, or_, select
from sqlmodel import Session

from app.db import is_postgres, upsert_rows
from app.orchestration import states as s
from app.orchestration.models import DagRun, TaskInstance
from app.orchestration.rails import from_sources
from app.routing.models import NO_TENANT, Pool, Tenant

TENANT = func.coalesce(DagRun.tenant_id, NO_TENANT)


def ready_on(queues: Sequence[str], now: datetime) -> ColumnElement[bool]:
    """Ready task instances (the claim rail's sources, eligible by `now`) on `queues`."""
    return and_(from_sources(s.CLAIM), TaskInstance.queue.in_(queues),
                or_(TaskInstance.next_eligible_at.is_(None), TaskInstance.next_eligible_at <= now))


def lock_routes(session: Session, queues: Sequence[str], now: datetime) -> list[str]:
    """The pools holding ready work on `queues`; on PostgreSQL locked FOR UPDATE in name order
    (then every capped tenant, in id order) until the claim commits, so that claims that may
    take from the same pool or for the same capped tenant count its in-flight work one after
    the other. An empty answer means there is nothing to claim."""
    pools = (select(Pool.name)
             .where(exists().where(TaskInstance.pool == Pool.name, ready_on(queues, now)))
             .order_by(Pool.name))
    if not is_postgres(session):
        return list(session.execute(pools).scalars())
    names = list(session.execute(pools.with_for_update(of=Pool)).scalars())
    if names:
        session.execute(select(Tenant.tenant_id).where(Tenant.max_running.is_not(None))
                        .order_by(Tenant.tenant_id).with_for_update())
    return names


def claimable(queues: Sequence[str], pools: Sequence[str], limit: int, now: datetime) -> Select:
    """The ids of up to `limit` task instances a claim serving `queues` may take now, from
    `pools` (which lock_routes locked), in claim order. Window functions, no per-task query:
    one statement over the ready work and the work in flight."""
    ready = (
        select(TaskInstance.id, TaskInstance.pool, TaskInstance.pool_slots, TaskInstance.priority_weight,
               TaskInstance.updated_at, Pool.slots, TENANT.label("tenant"), Tenant.max_running.label("cap"),
               Tenant.last_claimed_at.label("served"),
               func.row_number().over(partition_by=(TENANT, TaskInstance.priority_weight),
                                      order_by=(TaskInstance.updated_at, TaskInstance.id)).label("turn"))
        .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
        .join(Pool, Pool.name == TaskInstance.pool)
        .outerjoin(Tenant, Tenant.tenant_id == TENANT)
        .where(ready_on(queues, now), TaskInstance.pool.in_(pools), TaskInstance.pool_slots <= Pool.slots)
        .subquery("ready")
    )

    def order(q):  # the claim order, on any level's columns
        return (q.c.priority_weight.desc(), q.c.turn, nulls_first(q.c.served), q.c.updated_at, q.c.id)

    in_flight = TaskInstance.state.in_(s.IN_FLIGHT)
    tenant_busy = (select(TENANT.label("tenant"), func.count().label("busy")).select_from(TaskInstance)
                   .join(DagRun, DagRun.id == TaskInstance.dag_run_id)
                   .join(Tenant, and_(Tenant.tenant_id == TENANT, Tenant.max_running.is_not(None)))
                   .where(in_flight).group_by(TENANT).subquery("tenant_busy"))
    within_cap = (
        select(ready, func.row_number().over(partition_by=ready.c.tenant, order_by=order(ready)).label("taken"),
               func.coalesce(tenant_busy.c.busy, 0).label("busy"))
        .outerjoin(tenant_busy, tenant_busy.c.tenant == ready.c.tenant)
        .subquery("within_cap")
    )
    pool_busy = (select(TaskInstance.pool, func.sum(TaskInstance.pool_slots).label("busy"))
                 .where(in_flight, TaskInstance.pool.in_(pools)).group_by(TaskInstance.pool).subquery("pool_busy"))
    fitting = (
        select(within_cap, func.sum(within_cap.c.pool_slots).over(partition_by=within_cap.c.pool,
                                                                 order_by=order(within_cap)).label("filled"))
        .where(or_(within_cap.c.cap.is_(None), within_cap.c.taken + within_cap.c.busy <= within_cap.c.cap))
        .subquery("fitting")
    )
    return (select(fitting.c.id)
            .outerjoin(pool_busy, pool_busy.c.pool == fitting.c.pool)
            .where(fitting.c.filled + func.coalesce(pool_busy.c.busy, 0) <= fitting.c.slots)
            .order_by(*order(fitting)).limit(limit))


def take_turns(session: Session, tenant_ids: Iterable[str | None], now: datetime) -> None:
    """Record that a claim took work of these tenants now: their next turn comes after every
    tenant that waited longer. In tenant order, as every claim writes them (no deadlock)."""
    keys = sorted({NO_TENANT if t is None else t for t in tenant_ids})
    if keys:
        upsert_rows(session, Tenant, [{"tenant_id": k, "last_claimed_at": now} for k in keys],
                    index_elements=["tenant_id"], update_columns=["last_claimed_at"])
