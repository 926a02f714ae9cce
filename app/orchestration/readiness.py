"""Readiness and the run's state, judged under the run's lock: one predicate, one settlement.

`judge` says which readiness rail a waiting task instance takes from its upstreams' states;
`refresh_run` applies it to the whole run (after a failure, a clear or a mark, propagating
upstream_failed down the graph) and `ready_downstream`, on the success hot path, only to the
succeeded task's waiting downstream (docs/performance.md: no read of every task instance of
the run), falling back to `refresh_run` when a failure is yet to propagate. Either way the
rows move by the READY and UPSTREAM_FAIL rails' statements and the run's state is settled by
one statement, SETTLE_RUN. Every rail that makes a task instance claimable announces it (on
its queue) in the same transaction (app/orchestration/events.py), so waiting claims wake on commit.
"""

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import bindparam, case, exists, null, select, update
from sqlmodel import Session

from app.db.statements import one_of
from app.db.types import UTCDateTime
from app.orchestration import states
from app.orchestration.cas import RUNS, TI, from_sources, lock_run, moved_to
from app.orchestration.events import announce_queues
from app.orchestration.models import TaskInstance
from app.orchestration.states import Rail


def judge(upstream: Sequence[str]) -> Rail | None:
    """The readiness rail of a waiting task instance whose upstreams are in the states
    `upstream`: upstream_fail if one of them failed (or was skipped), else ready if all
    succeeded (or there are none), else None: it waits."""
    if any(st in states.NOT_SUCCEEDED for st in upstream):
        return states.UPSTREAM_FAIL
    if all(st == states.SUCCESS for st in upstream):
        return states.READY
    return None


# The statements, built once with bound values (building one cost more than running it).
WAITING = select(TI.c.id, TI.c.upstream_task_ids).where(TI.c.dag_run_id == bindparam("run"), TI.c.state == states.NONE)
UPSTREAM_STATES = select(TI.c.task_id, TI.c.state).where(TI.c.dag_run_id == bindparam("run"),
                                                         TI.c.task_id.in_(bindparam("tasks", expanding=True)))
MOVES = {rail: update(TI).where(TI.c.id.in_(bindparam("ids", expanding=True)), from_sources(rail))
         .values(**moved_to(rail, bindparam("now", type_=UTCDateTime()))).returning(TI.c.queue)
         for rail in (states.READY, states.UPSTREAM_FAIL)}
_OF_RUN = TI.c.dag_run_id == bindparam("run")
_UNFINISHED, _UNSUCCESSFUL = exists().where(_OF_RUN, ~one_of(TI.c.state, states.FINISHED)), \
    exists().where(_OF_RUN, TI.c.state != states.SUCCESS)
SETTLE_RUN = update(RUNS).where(RUNS.c.id == bindparam("run")).values(
    state=case((_UNFINISHED, "running"), (_UNSUCCESSFUL, states.FAILED), else_=states.SUCCESS),
    ended_at=case((_UNFINISHED, null()), else_=bindparam("now", type_=UTCDateTime())),
    updated_at=bindparam("now", type_=UTCDateTime()))


def settle_run(session: Session, dag_run_id: uuid.UUID, now: datetime) -> None:
    """The run's state from its task instances': running while one is unfinished, else
    success if all succeeded, else failed (and then ended now)."""
    session.execute(SETTLE_RUN, {"run": dag_run_id, "now": now})


def _move(session: Session, rail: Rail, ids: list[uuid.UUID], now: datetime) -> None:
    queues = session.execute(MOVES[rail], {"ids": ids, "now": now}).scalars().all()
    if rail is states.READY:
        announce_queues(session, queues)


def ready_downstream(session: Session, dag_run_id: uuid.UUID, task_id: str, now: datetime) -> None:
    """Readiness after `task_id` succeeded, under the run's lock: only waiting tasks downstream
    of it can change, so only they are judged (with their upstreams' states), and the run's
    state is settled in one statement; not O(tasks in the run) in Python. A downstream task
    that would turn upstream_failed (a failure the full judgement had not yet propagated)
    falls back to refresh_run."""
    waiting = session.execute(WAITING, {"run": dag_run_id}).all()
    downstream = [row for row in waiting if task_id in row.upstream_task_ids]
    if downstream:
        upstream_states: dict[str, list[str]] = {}
        tasks = sorted({t for d in downstream for t in d.upstream_task_ids})
        for row in session.execute(UPSTREAM_STATES, {"run": dag_run_id, "tasks": tasks}):
            upstream_states.setdefault(row.task_id, []).append(row.state)
        ready = []
        for row in downstream:
            rail = judge([st for task in row.upstream_task_ids for st in upstream_states.get(task, [])])
            if rail is states.UPSTREAM_FAIL:
                refresh_run(session, dag_run_id, now)
                return
            if rail is states.READY:
                ready.append(row.id)
        if ready:
            _move(session, states.READY, ready, now)
    settle_run(session, dag_run_id, now)


def refresh_run(session: Session, dag_run_id: uuid.UUID, now: datetime, *, reopen: bool = False) -> None:
    """Readiness and the run's state, after a task instance finished (or was cleared).

    Under the run's lock, two upstreams finishing at once are judged one after the other and
    the second always sees the first: a downstream task is never left waiting.
    Waiting tasks whose upstreams all succeeded become scheduled; those with a failed upstream
    become upstream_failed; with `reopen`, upstream_failed tasks wait again.
    """
    lock_run(session, dag_run_id)
    if reopen:
        session.execute(update(TaskInstance)
                        .where(TaskInstance.dag_run_id == dag_run_id, from_sources(states.REOPEN))
                        .values(**moved_to(states.REOPEN, now)).execution_options(synchronize_session=False))
    # Only what readiness needs, not whole rows: this runs on every finished task instance.
    rows = session.execute(
        select(TaskInstance.id, TaskInstance.task_id, TaskInstance.state, TaskInstance.upstream_task_ids)
        .where(TaskInstance.dag_run_id == dag_run_id)).all()
    stored = {row.id: row.state for row in rows}
    state = dict(stored)
    by_task: dict[str, list[uuid.UUID]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row.id)
    changed = True
    while changed:  # upstream_failed propagates down the graph
        changed = False
        for row in rows:
            if state[row.id] != states.NONE:
                continue
            rail = judge([state[u] for task in row.upstream_task_ids for u in by_task.get(task, [])])
            if rail is not None:
                state[row.id], changed = rail.target, True
    for rail in MOVES:
        moved = [ti_id for ti_id, st in state.items() if st == rail.target and stored[ti_id] != rail.target]
        if moved:
            _move(session, rail, moved, now)
    settle_run(session, dag_run_id, now)
