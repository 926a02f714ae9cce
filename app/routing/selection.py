"""The claim's selection: which ready task instances a claim may take, and in which order.

Rules (docs/behaviour.md, "Routing"):
- a claim takes only work on the queues it serves;
- higher `priority_weight` first; among equal weights, the tenant whose work a claim took
  least recently first (a tenant never claimed before comes first; runs without a tenant are
  one more tenant), then oldest first. So with k tenants with ready work, each one's oldest
  ready task is claimed within the next k claims;
- a task instance is taken only while its `pool_slots` fit in its pool's open slots (slots
  minus the slots of its task instances queued and running), and only while its tenant is
  under its cap (`max_running` task instances queued and running), if it has one. A task
  asking more slots than its pool has waits until the pool grows.

Race-free by construction: nothing is kept as a counter. The claim first locks (PostgreSQL:
SELECT … FOR UPDATE, in name order) every pool holding ready work on its queues and, when any
tenant has a cap, every capped tenant; the statement that then counts what is in flight and
chooses starts after the locks are held, so it sees every claim committed before it, and
claims that may fill the same pool or capped tenant choose one after the other (SQLite runs
one writer at a time). Only the claim moves a task instance into flight; every rail out of
flight only frees room.

Cost: one small indexed statement for the locks (two when caps exist), one for the turns, and
the claim's own statement, whose selection is a top-N sort of the ready work on the claim's
queues (as a plain claim's is) and window functions over at most `limit` rows.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Integer, Select, and_, bindparam, exists, func, nulls_first, or_, select
from sqlmodel import Session

from app.db import UTCDateTime, is_postgres, upsert
from app.orchestration import states as s
from app.orchestration.models import TaskInstance
from app.orchestration.rails import from_sources
from app.routing.models import NO_TENANT, Pool, Tenant

TENANT = func.coalesce(TaskInstance.tenant_id, NO_TENANT)


@dataclass(frozen=True)
class Routes:
    """What a claim locked: the pools holding ready work on its queues, and whether any
    tenant has a cap (then the capped tenants too)."""

    pools: list[str]
    capped: bool


# The statements below are built once, with these parameters, and run with `params(...)`:
# building and hashing a statement of this size on every claim costs more than running it.
QUEUES, POOLS = bindparam("claim_queues", expanding=True), bindparam("claim_pools", expanding=True)
NOW, LIMIT = bindparam("claim_now", type_=UTCDateTime()), bindparam("claim_limit", type_=Integer())


def params(queues: Sequence[str], now: datetime, routes: Routes | None = None, limit: int = 0) -> dict[str, Any]:
    """The values of the statements' parameters for one claim."""
    return {"claim_queues": list(queues), "claim_now": now, "claim_pools": routes.pools if routes else [],
            "claim_limit": limit}


def ready_on() -> ColumnElement[bool]:
    """Ready task instances (the claim rail's source state, eligible by NOW) on QUEUES."""
    return and_(from_sources(s.CLAIM), TaskInstance.queue.in_(QUEUES),
                or_(TaskInstance.next_eligible_at.is_(None), TaskInstance.next_eligible_at <= NOW))


@cache
def _routes_statements(postgres: bool) -> tuple[Select, Select]:
    capped = exists().where(Tenant.max_running.is_not(None))
    pools = (select(Pool.name, capped)
             .where(exists().where(TaskInstance.pool == Pool.name, ready_on())).order_by(Pool.name))
    caps = select(Tenant.tenant_id).where(Tenant.max_running.is_not(None)).order_by(Tenant.tenant_id)
    if postgres:  # FOR NO KEY UPDATE: claims and resizes queue on each other; a run naming the pool
        # (FOR KEY SHARE) does not.
        return pools.with_for_update(of=Pool, key_share=True), caps.with_for_update()
    return pools, caps


def lock_routes(session: Session, queues: Sequence[str], now: datetime) -> Routes | None:
    """Lock, until the claim commits, the pools holding ready work on `queues` and, when any
    tenant has a cap, the capped tenants: each in key order, pools first, as every claim
    locks them (no deadlock). None when no pool holds ready work on `queues`. (On SQLite,
    which runs one writer at a time, nothing needs locking.)"""
    pools, caps = _routes_statements(is_postgres(session))
    rows = session.execute(pools, params(queues, now)).all()
    if not rows:
        return None
    if rows[0][1] and is_postgres(session):
        session.execute(caps)
    return Routes([name for name, _ in rows], rows[0][1])


@cache
def _held_back_statement() -> Select:
    return select(exists().where(ready_on()))


def held_back(session: Session, queues: Sequence[str], now: datetime) -> bool:
    """Whether ready work on `queues` is left after a claim that took none of it: what a pool
    or a cap holds back (a waiting claim then also wakes when room is freed)."""
    return bool(session.execute(_held_back_statement(), params(queues, now)).scalar())


@cache
def claimable(capped: bool) -> Select:
    """The ids of up to LIMIT task instances a claim serving QUEUES may take at NOW from the
    POOLS it locked (`capped`: some tenant has a cap); run it with params(). One statement,
    evaluated after the locks: it counts the slots (and capped tenants' task instances) in
    flight, takes the first LIMIT ready task instances in claim order among those that fit on
    their own, and cuts where several in one claim would together overfill a pool or a capped
    tenant."""
    in_flight = TaskInstance.state.in_(s.IN_FLIGHT)
    pool_busy = (select(TaskInstance.pool, func.sum(TaskInstance.pool_slots).label("busy"))
                 .where(in_flight, TaskInstance.pool.in_(POOLS)).group_by(TaskInstance.pool).subquery())
    room = (select(Pool.name, (Pool.slots - func.coalesce(pool_busy.c.busy, 0)).label("open"))
            .outerjoin(pool_busy, pool_busy.c.pool == Pool.name).where(Pool.name.in_(POOLS))
            .cte("room").prefix_with("MATERIALIZED"))
    columns = [TaskInstance.id, TaskInstance.pool, TaskInstance.pool_slots, TaskInstance.priority_weight,
               TaskInstance.updated_at, TENANT.label("tenant"), Tenant.last_claimed_at.label("served"),
               room.c.open.label("pool_open")]
    fits_alone = [room.c.open >= TaskInstance.pool_slots]
    top = select(*columns).join(room, room.c.name == TaskInstance.pool).outerjoin(Tenant, Tenant.tenant_id == TENANT)
    if capped:
        tenant_busy = (select(TENANT.label("tenant"), func.count().label("busy"))
                       .where(in_flight, TENANT.in_(select(Tenant.tenant_id).where(Tenant.max_running.is_not(None))))
                       .group_by(TENANT).cte("tenant_busy").prefix_with("MATERIALIZED"))
        tenant_open = Tenant.max_running - func.coalesce(tenant_busy.c.busy, 0)
        top = top.add_columns(tenant_open.label("tenant_open")).outerjoin(tenant_busy, tenant_busy.c.tenant == TENANT)
        fits_alone.append(or_(Tenant.max_running.is_(None), tenant_open > 0))
    order = (TaskInstance.priority_weight.desc(), nulls_first(Tenant.last_claimed_at), TaskInstance.updated_at,
             TaskInstance.id)
    top = top.where(ready_on(), *fits_alone).order_by(*order).limit(LIMIT).subquery("top")
    rank = (top.c.priority_weight.desc(), nulls_first(top.c.served), top.c.updated_at, top.c.id)
    fitting = select(top, func.sum(top.c.pool_slots).over(partition_by=top.c.pool, order_by=rank).label("filled"),
                     func.row_number().over(partition_by=top.c.tenant, order_by=rank).label("taken")).subquery()
    fits = [fitting.c.filled <= fitting.c.pool_open]
    if capped:
        fits.append(or_(fitting.c.tenant_open.is_(None), fitting.c.taken <= fitting.c.tenant_open))
    return select(fitting.c.id).where(*fits)


def take_turns(session: Session, tenant_ids: Iterable[str | None], now: datetime) -> None:
    """Record that a claim took work of these tenants now: their next turn comes after every
    tenant that waited longer. In tenant order, as every claim writes them (no deadlock)."""
    for key in sorted({NO_TENANT if t is None else t for t in tenant_ids}):
        upsert(session, Tenant, {"tenant_id": key, "last_claimed_at": now}, ["tenant_id"], {"last_claimed_at": now})
