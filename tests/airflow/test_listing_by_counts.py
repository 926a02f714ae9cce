"""The task-instance list served by the kept counts (app/airflow/listing.py, app/orchestration/
counts.py): filtered by state and the DAG alone, its total_entries and, in the default order, a
deep offset skipped by the counts give exactly what the plain query gives through `paginate`,
at every offset (across DAG boundaries and into the mapped task instances), with deltas pending
and folded."""

import pytest
from sqlalchemy import event, select, update
from sqlmodel import Session

from app.airflow.filters import conditions
from app.airflow.list_params import TaskInstancesQuery, TaskInstancesQueryV1
from app.airflow.listing import TI_DEFAULT_ORDER, TI_SHOWN, TI_TIES, list_task_instances
from app.db.statements import paginate
from app.orchestration.counts import fold_counts
from app.orchestration.models import TaskInstance
from tests.support.api import task

# Names whose order differs between collations and from their order of creation.
DAGS = ["b", "A", "a_1", "a-1", "0z", "a.1", "B", "a"]
STATE_FILTERS = [["success"], ["success", "failed"], ["up_for_retry", "failed", "running"], []]
LIST = "/api/v2/dags/{dag_id}/dagRuns/~/taskInstances"


@pytest.fixture
def history(operator, engine):
    """Runs of eight DAGs of uneven sizes, three with mapped tasks, in several states; some
    changes folded into the counts, later ones pending as deltas."""
    for n, dag_id in enumerate(DAGS):
        mapped = [task("fan", map_index=i) for i in range(n % 3)]
        for run in range(1 + n % 3):
            operator.create_run(*(task(f"t{i}") for i in range(2 + n % 4)), *mapped, dag_id=dag_id, run_id=f"r{run}")
    with Session(engine) as session:
        ids = session.execute(select(TaskInstance.id).order_by(TaskInstance.id)).scalars().all()
        for n, ti_id in enumerate(ids):
            state = ("success", "success", "failed", "running", "up_for_retry", "success", "scheduled")[n % 7]
            session.execute(update(TaskInstance).where(TaskInstance.id == ti_id).values(state=state))
            if n == len(ids) // 2:
                fold_counts(session=session)
        session.commit()
    return operator


def plain(session, dag_id, params, order, limit, offset):
    """The oracle: the list's query through `paginate`, as it was served before the counts."""
    query = select(TaskInstance).where(*conditions(params, TI_SHOWN)).order_by(*order)
    if dag_id != "~":
        query = query.where(TaskInstance.dag_id == dag_id)
    rows, total = paginate(session, query, limit, offset)
    return [ti.id for ti in rows], total


def served(session, dag_id, params, order, limit, offset):
    rows, total = list_task_instances(session, dag_id, "~", params, order, limit, offset)
    return [ti.id for ti in rows], total


@pytest.mark.parametrize("states", STATE_FILTERS, ids=lambda s: ",".join(s) or "any")
def test_every_offset_equals_the_plain_query(history, engine, states):
    params = TaskInstancesQuery(state=states)
    with Session(engine) as session:
        total = plain(session, "~", params, TI_DEFAULT_ORDER, 1, 0)[1]
        assert total > 20
        for limit in (1, 3, 100):
            for offset in range(total + 2):
                assert served(session, "~", params, TI_DEFAULT_ORDER, limit, offset) == \
                    plain(session, "~", params, TI_DEFAULT_ORDER, limit, offset), (limit, offset)


@pytest.mark.parametrize("dag_id", ["a", "B", "nope"])
def test_one_dags_list_equals_the_plain_query(history, engine, dag_id):
    with Session(engine) as session:
        for states in STATE_FILTERS:
            params = TaskInstancesQuery(state=states)
            for limit, offset in ((1, 0), (1, 3), (100, 0), (100, 5), (3, 50)):
                assert served(session, dag_id, params, TI_DEFAULT_ORDER, limit, offset) == \
                    plain(session, dag_id, params, TI_DEFAULT_ORDER, limit, offset), (states, limit, offset)


def test_other_orders_and_airflow_2_count_by_the_kept_counts_alike(history, engine):
    with Session(engine) as session:
        for order in (TI_TIES, [TaskInstance.map_index.desc(), *TI_TIES]):
            for offset in (0, 7, 40):
                params = TaskInstancesQueryV1(state=["success", "failed"])
                assert served(session, "~", params, order, 5, offset) == plain(session, "~", params, order, 5, offset)


def statements_of(engine, call):
    """What `call` runs against the database, statement by statement."""
    seen = []

    def record(conn, cursor, statement, *args):
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return seen


def test_a_deep_offset_reads_only_the_dags_its_page_spans(history, engine):
    params = TaskInstancesQuery(state=["success"])
    with Session(engine) as session:
        total = plain(session, "~", params, TI_DEFAULT_ORDER, 1, 0)[1]
        seen = statements_of(engine, lambda: served(session, "~", params, TI_DEFAULT_ORDER, 2, total // 2))
        assert not any("count(*)" in s for s in seen)  # the total came from the kept counts
        assert "BETWEEN" in seen[-1], seen
        mapped = statements_of(engine, lambda: served(session, "~", params, TI_DEFAULT_ORDER, 2, total - 1))
        assert "BETWEEN" not in mapped[-1]  # it reaches the mapped task instances: the plain page
        other = statements_of(engine, lambda: served(session, "~", TaskInstancesQuery(state=["success"], pool=["p"]),
                                                     TI_DEFAULT_ORDER, 2, 5))
        assert any("count(*)" in s for s in other)  # another filter: counted as before


def test_the_api_answers_as_the_plain_query(history, engine):
    params = TaskInstancesQuery(state=["success"])
    with Session(engine) as session:
        total = plain(session, "~", params, TI_DEFAULT_ORDER, 1, 0)[1]
        for offset in (0, total // 2, total - 1):
            ids, count = plain(session, "~", params, TI_DEFAULT_ORDER, 4, offset)
            body = history.get(LIST.format(dag_id="~"), params={"state": "success", "limit": 4,
                                                                  "offset": offset}).json()
            assert ([t["id"] for t in body["task_instances"]], body["total_entries"]) == ([str(i) for i in ids], count)
