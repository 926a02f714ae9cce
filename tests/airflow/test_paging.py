"""The task-instance list pages by its keys first (app/db/statements.paginate_by_key): paging
through it, page by page, gives exactly the rows of one big page in the same order, for orders
whose leading column ties across many rows, with and without filters."""

import pytest

from tests.support.api import Worker, task

LIST = "/api/v2/dags/{dag_id}/dagRuns/~/taskInstances"
ORDERS = ["map_index", "-map_index", "state", "-state", "start_date", "-end_date", "try_number", "id"]


@pytest.fixture
def many(operator):
    """Three runs of two DAGs: plain and mapped tasks (map_index ties everywhere), some claimed."""
    mapped = [task("fan", map_index=i) for i in range(3)]
    for dag_id, run_id in (("a", "r1"), ("b", "r1"), ("a", "r2")):
        operator.create_run(task("x"), task("y"), task("z", "x"), *mapped, dag_id=dag_id, run_id=run_id)
    worker = Worker(operator)
    for attempt in worker.claim(limit=4):
        attempt.report("running")
    return operator


def listed(operator, dag_id="~", **params):
    body = operator.get(LIST.format(dag_id=dag_id), params=params).json()
    return [(t["dag_id"], t["dag_run_id"], t["task_id"], t["map_index"]) for t in body["task_instances"]], \
        body["total_entries"]


def paged(operator, size, total, dag_id="~", **params):
    found = []
    for offset in range(0, total + size, size):
        page, count = listed(operator, dag_id, limit=size, offset=offset, **params)
        assert count == total
        found += page
    return found


@pytest.mark.parametrize("order", ORDERS)
def test_pages_of_two_are_the_one_big_page(many, order):
    whole, total = listed(many, order_by=order, limit=100)
    assert total == len(whole) == 18
    assert paged(many, 2, total, order_by=order) == whole


def test_paging_a_filtered_list_keeps_its_order(many):
    for dag_id, params in (("~", {"state": "scheduled"}), ("a", {}), ("a", {"state": "running"})):
        whole, total = listed(many, dag_id, limit=100, **params)
        assert total == len(whole) > 0
        assert paged(many, 3, total, dag_id, **params) == whole


def test_an_offset_past_the_end_is_an_empty_page_with_the_total(many):
    assert listed(many, offset=500) == ([], 18)
