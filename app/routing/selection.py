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
SELECT … FOR UPDATE, in name order) every pool holding ready work on its queues and then every
capped tenant; the statements that then count what is in flight and
choose start after the locks are held, so they see every claim committed before them, and
claims that may fill the same pool or capped tenant choose one after the other (SQLite runs
one writer at a time). Only the claim moves a task instance into flight; every rail out of
flight only frees room.

Cost: at the speed of the index, not of the backlog. Ready work falls into groups, one per
(queue, pool, tenant), and inside a group the claim order is the order of the ready index
(`ix_task_instances_ready`: priority, then age). The choice walks the groups (a loose index
scan: one probe per group), takes each group's first task that fits, and ranks those: a claim
of one task is that one statement, whatever the backlog. A claim of n > 1 then reads the first
n of the best n groups (the n best tasks are among them) and cuts them to what fits together.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Integer,
    Row,
    Select,
    bindparam,
    case,
    func,
    literal,
    nulls_first,
    or_,
    select,
    union_all,
)
from sqlmodel import Session

from app.db.dialect import Dialect, dialect_of
from app.db.statements import one_of, upsert_columns, written
from app.db.types import UTCDateTime
from app.orchestration.models import TI_IN_FLIGHT_STATES, TI_READY_STATE, TaskInstance
from app.routing.models import NO_TENANT, Pool, Tenant

# Core tables, not the ORM entities: a statement that names an entity's attribute runs through
# the ORM's execution path (its bulk UPDATE machinery, for the claim), which cost a claim more
# than its statements (docs/performance.md).
TI, POOL, TENANT = TaskInstance.__table__, Pool.__table__, Tenant.__table__


def tenant_of(ti: Any) -> ColumnElement[str]:
    """A task instance's tenant key, written as the ready index has it (runs without a tenant: '')."""
    return func.coalesce(ti.c.tenant_id, written(NO_TENANT))


def is_ready(ti: Any) -> ColumnElement[bool]:
    """The ready index's predicate, as literals: both databases use a partial index only for a
    query that names its predicate's values."""
    return ti.c.state == written(TI_READY_STATE)


def is_in_flight(ti: Any) -> ColumnElement[bool]:
    return one_of(ti.c.state, TI_IN_FLIGHT_STATES)


@dataclass(frozen=True)
class Routes:
    """What a claim locked: the pools holding ready work on its queues, and whether any
    tenant has a cap (then it locked the capped tenants too)."""

    pools: list[str]
    capped: bool


# The statements below are built once per shape, with these parameters, and run with
# `params(...)`: building and hashing a statement of this size on every claim costs more
# than running it. A claim's queues are one parameter each (claim_queue_{n}), its statements
# built once per number of queues: a list bound to one parameter is rendered into the
# statement on every run.
POOLS = bindparam("claim_pools", expanding=True)
NOW, LIMIT = bindparam("claim_now", type_=UTCDateTime()), bindparam("claim_limit", type_=Integer())


def params(queues: Sequence[str], now: datetime, routes: Routes | None = None, limit: int = 0) -> dict[str, Any]:
    """The values of the statements' parameters for one claim."""
    values = {"claim_now": now, "claim_pools": routes.pools if routes else [], "claim_limit": limit}
    values.update({f"claim_queue_{n}": queue for n, queue in enumerate(queues)})
    return values


def eligible(ti: Any) -> ColumnElement[bool]:
    return or_(ti.c.next_eligible_at.is_(None), ti.c.next_eligible_at <= NOW)


def queue_params(queue_count: int) -> list[BindParameter[str]]:
    """The parameters naming a claim's `queue_count` queues."""
    return [bindparam(f"claim_queue_{n}", type_=TI.c.queue.type) for n in range(queue_count)]


def ready_on(queue_count: int, ti: Any = TI) -> ColumnElement[bool]:
    """Ready task instances (the claim rail's source state, eligible by NOW) on the claim's
    `queue_count` queues."""
    return is_ready(ti) & ti.c.queue.in_(queue_params(queue_count)) & eligible(ti)


def any_ready(queue_count: int) -> ColumnElement[bool]:
    """Whether any task instance is ready on the claim's `queue_count` queues at NOW (one probe
    of the ready index per queue); run with params()."""
    return select(TI.c.id).where(ready_on(queue_count)).limit(1).scalar_subquery().is_not(None)


@cache
def _routes_statements(dialect: Dialect, queue_count: int) -> tuple[Select, Select]:
    # A scalar probe per pool, not EXISTS: PostgreSQL may turn an EXISTS into a semi-join that
    # reads every ready row; a probe with LIMIT 1 reads one index entry.
    some_ready = (select(TI.c.id).where(TI.c.pool == POOL.c.name, ready_on(queue_count)).limit(1)
                  .scalar_subquery())
    pools = select(POOL.c.name).where(some_ready.is_not(None)).order_by(POOL.c.name)
    caps = select(TENANT.c.tenant_id).where(TENANT.c.max_running.is_not(None)).order_by(TENANT.c.tenant_id)
    # FOR NO KEY UPDATE: claims and resizes queue on each other; a run naming the pool (FOR KEY
    # SHARE) does not.
    return dialect.for_update(pools, of=POOL, key_share=True), dialect.for_update(caps)


def lock_routes(session: Session, queues: Sequence[str], now: datetime) -> Routes | None:
    """Lock, until the claim commits, the pools holding ready work on `queues`, then the capped
    tenants: each in key order, as every claim locks them (no deadlock). None when no pool holds
    ready work on `queues`. (On SQLite, which runs one writer at a time, nothing needs locking.)

    The caps are read by a statement of their own, begun once the pools are held: a change to
    the caps locks every pool first (lock_all_pools), so this claim's caps are the ones in force
    until it commits. A claim that took a tenant's turn (take_turns) before a new cap on that
    tenant, while another claim that sees the cap holds the tenant and waits on this one's
    capped tenants, would otherwise deadlock with it."""
    pools, caps = _routes_statements(dialect_of(session), len(queues))
    names = session.execute(pools, params(queues, now)).scalars().all()
    if not names:
        return None
    return Routes(list(names), capped=bool(session.execute(caps).first()))


def lock_pools(session: Session, names: Iterable[str]) -> None:
    """Lock the pools `names` as a claim locks them (in name order, until the transaction
    ends), for a rail that moves ready task instances of those pools out of reach (a run's
    cancel): it waits for the claims holding them and holds off new ones, so it and a claim
    never wait on each other's task instances."""
    pools = select(POOL.c.name).where(POOL.c.name.in_(sorted(set(names)))).order_by(POOL.c.name)
    session.execute(dialect_of(session).for_update(pools, of=POOL, key_share=True)).all()


def lock_all_pools(session: Session) -> None:
    """Before a change to the tenants' caps: wait for every claim holding a pool, and hold off
    new ones until this change commits. A table lock, so that it covers a pool created at any
    moment too: EXCLUSIVE conflicts with the row locks claims take (and a run's FOR KEY SHARE
    of its pools, which then waits as briefly), not with plain reads."""
    dialect_of(session).lock_table(session, Pool.__tablename__)


# --- the choice ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ClaimCandidate:
    """A ready task instance a claim of several may take, with its group (pool, tenant, room)."""

    id: Any
    group: Row
    pool_slots: int
    priority_weight: int
    updated_at: datetime

    @property
    def rank(self) -> tuple[Any, ...]:
        """The claim order: priority, then the least recently served tenant (never served
        first), then oldest, then id."""
        served = self.group.served
        return -self.priority_weight, served is not None, served, self.updated_at, str(self.id)


def _in_group(ti: Any, queue: Any, pool: Any, tenant: Any) -> list[ColumnElement[bool]]:
    return [is_ready(ti), ti.c.queue == queue, ti.c.pool == pool, tenant_of(ti) == tenant]


@cache
def _groups_statement(queue_count: int, capped: bool) -> Select:
    """Up to LIMIT groups (queue, pool, tenant) of ready work on the claim's queues in the
    POOLS it locked, each with its first task instance that fits on its own, best first: one
    probe of the ready index per group (a recursive walk from each group to the next tenant's).
    Run it with params(); `queue_count` is the number of queues the claim serves."""
    t = TI.alias("t")
    busy = (select(func.coalesce(func.sum(t.c.pool_slots), 0)).where(is_in_flight(t), t.c.pool == POOL.c.name)
            .scalar_subquery())
    room = (select(POOL.c.name.label("pool"), (POOL.c.slots - busy).label("open")).where(POOL.c.name.in_(POOLS))
            .cte("room"))
    seeds = union_all(*(select(queue.label("queue"), room.c.pool) for queue in queue_params(queue_count))).cte("seeds")

    def first_tenant(queue: Any, pool: Any, after: Any = None) -> Any:
        where = [is_ready(t), t.c.queue == queue, t.c.pool == pool]
        if after is not None:
            where.append(tenant_of(t) > after)
        return select(tenant_of(t)).where(*where).order_by(tenant_of(t)).limit(1).scalar_subquery()

    groups = select(seeds.c.queue, seeds.c.pool, first_tenant(seeds.c.queue, seeds.c.pool).label("tenant")) \
        .cte("groups", recursive=True)
    previous = groups.alias("previous")
    groups = groups.union_all(select(previous.c.queue, previous.c.pool,
                                     first_tenant(previous.c.queue, previous.c.pool, previous.c.tenant))
                              .where(previous.c.tenant.is_not(None)))
    first_fit = (select(t.c.id).where(*_in_group(t, groups.c.queue, groups.c.pool, groups.c.tenant), eligible(t),
                                      t.c.pool_slots <= room.c.open)
                 .order_by(t.c.priority_weight.desc(), t.c.updated_at, t.c.id).limit(1).scalar_subquery())
    tops = (select(groups.c.queue, groups.c.pool, groups.c.tenant, room.c.open, first_fit.label("id"))
            .join(room, room.c.pool == groups.c.pool).where(groups.c.tenant.is_not(None)).cte("tops"))
    top = TI.alias("top")  # aliased: the claim's UPDATE of task_instances takes this as its subquery
    columns = [tops.c.queue, tops.c.pool, tops.c.tenant, tops.c.open, top.c.id, top.c.pool_slots,
               top.c.priority_weight, top.c.updated_at, TENANT.c.last_claimed_at.label("served")]
    best = select(*columns).join(top, top.c.id == tops.c.id).outerjoin(TENANT, TENANT.c.tenant_id == tops.c.tenant)
    if capped:
        in_flight = select(func.count()).where(is_in_flight(t), tenant_of(t) == tops.c.tenant).scalar_subquery()
        tenant_open = case((TENANT.c.max_running.is_(None), None), else_=TENANT.c.max_running - in_flight)
        best = best.add_columns(tenant_open.label("tenant_open")).where(
            or_(TENANT.c.max_running.is_(None), tenant_open > 0))
    else:
        best = best.add_columns(literal(None, Integer()).label("tenant_open"))
    return best.order_by(top.c.priority_weight.desc(), nulls_first(TENANT.c.last_claimed_at), top.c.updated_at,
                         top.c.id).limit(LIMIT)


@cache
def _firsts_statement(group_count: int) -> Select:
    """The first LIMIT task instances (by the ready index's order) that fit on their own in
    each of `group_count` groups, named by the parameters group_{n}_queue/pool/tenant/open."""
    t = TI.alias("t")
    parts = []
    for n in range(group_count):
        queue, pool, tenant, room = (bindparam(f"group_{n}_{name}") for name in ("queue", "pool", "tenant", "open"))
        parts.append(select(literal(n, Integer()).label("group_no"), t.c.id, t.c.pool_slots, t.c.priority_weight,
                            t.c.updated_at)
                     .where(*_in_group(t, queue, pool, tenant), eligible(t), t.c.pool_slots <= room)
                     .order_by(t.c.priority_weight.desc(), t.c.updated_at, t.c.id).limit(LIMIT).subquery()
                     .select())
    return union_all(*parts) if len(parts) > 1 else parts[0]


@cache
def first_choice(queue_count: int, capped: bool) -> Any:
    """The id of the one task instance a claim of one takes (the best group's first task that
    fits), as a scalar subquery for the claim's UPDATE: choice and claim in one statement, so the
    pools' lock is held one round trip less. Run with params(…, limit=1)."""
    return select(_groups_statement(queue_count, capped).subquery().c.id).scalar_subquery()


def choose(session: Session, routes: Routes, queues: Sequence[str], now: datetime, limit: int) -> list[Any]:
    """The ids of up to `limit` task instances a claim serving `queues` may take at `now` from
    the pools it locked (lock_routes), in claim order: each fits its pool's open slots and
    its tenant's cap together with those before it."""
    values = params(queues, now, routes, limit)
    groups = session.execute(_groups_statement(len(queues), routes.capped), values).all()
    if limit == 1 or not groups:
        return [group.id for group in groups]  # each group's first fits on its own
    return _fit(groups, session.execute(_firsts_statement(len(groups)), {**values, **{
        f"group_{n}_{name}": getattr(group, name) for n, group in enumerate(groups)
        for name in ("queue", "pool", "tenant", "open")}}).all(), limit)


def _fit(groups: list[Row], rows: Iterable[Row], limit: int) -> list[Any]:
    """The first `limit` of `rows` in claim order, cut where they would together overfill a
    pool or a capped tenant (every task after the first that does not fit in its pool, or past
    its tenant's cap, is cut: a claim never skips ahead within a pool)."""
    candidates = sorted((ClaimCandidate(row.id, groups[row.group_no], row.pool_slots, row.priority_weight,
                                        row.updated_at) for row in rows), key=lambda c: c.rank)
    filled: dict[str, int] = {}
    taken: dict[str, int] = {}
    chosen = []
    for candidate in candidates[:limit]:
        group = candidate.group
        filled[group.pool] = filled.get(group.pool, 0) + candidate.pool_slots
        taken[group.tenant] = taken.get(group.tenant, 0) + 1
        if filled[group.pool] <= group.open and (group.tenant_open is None or taken[group.tenant] <= group.tenant_open):
            chosen.append(candidate.id)
    return chosen


def taking_turn(claimed: Any, dialect: Dialect) -> Any:
    """take_turns for the one row of `claimed` (the CTE of the row a claim of one took), in the
    claim's own statement, where one statement may write several tables; run with params()."""
    turn = dialect.insert(TENANT).from_select(["tenant_id", "last_claimed_at"], select(tenant_of(claimed), NOW))
    return (turn.on_conflict_do_update(index_elements=["tenant_id"],
                                       set_={"last_claimed_at": turn.excluded.last_claimed_at})
            .returning(TENANT.c.tenant_id).cte("turn"))


TURNS_LOCK_KEY = 0x7475726E73  # "turns"


def hold_turns(session: Session) -> None:
    """Before a transaction writes the turns of more than one tenant: wait for any other that
    does, until it commits (PostgreSQL: a transaction-level advisory lock, taken after the
    pools). Claims hold at most one tenant's turn row otherwise, and never wait on anything
    once they hold it, so no two transactions can each hold a turn the other waits for
    (a batch of claims takes the turns in claim order, not in tenant order). The capped
    tenants' rows, which claims lock when any tenant has a cap, are locked before any turn, in
    key order (lock_routes)."""
    dialect_of(session).hold(session, TURNS_LOCK_KEY)


def take_turns(session: Session, tenant_ids: Iterable[str | None], now: datetime) -> None:
    """Record that a claim took work of these tenants now: their next turn comes after every
    tenant that waited longer."""
    keys = sorted({NO_TENANT if t is None else t for t in tenant_ids})
    if len(keys) > 1:
        hold_turns(session)
    for key in keys:
        upsert_columns(session, Tenant, {"tenant_id": key, "last_claimed_at": now}, ["tenant_id"], ["last_claimed_at"])
