"""Airflow 3.3.2's metadata database seeded in bench/seeding.py's shape, for bench/peer_growth.py:
200 DAGs of ten chained tasks, runs of ten task instances, one run every 52 s going back 60 days
(at a million task instances), 27 % of the finished task instances retried once, the newest 100
runs still running with their task instances scheduled. The same run numbers, DAG ids, run ids,
task ids and states as fenceline's seed, so both lists match the same rows.

Airflow makes the DAGs (`dags reserialize`: the dag, dag_version, serialized_dag and dag_code
rows) and one run of dag_000 through its REST API; `keep_template` copies that run and its task
instances aside, and `seed` clones them with set-based SQL, so every NOT NULL column and every
join the list needs is filled as Airflow fills it. A retried task instance keeps its first try
where Airflow keeps it: a task_instance_history row with that try's own id (Airflow gives the task
instance a new id on a retry).
"""

import psycopg

from bench.seeding import DAGS, RETRIED_PERCENT, RUNNING, SPACING_SECONDS, TASKS, insert_runs

TEMPLATE_RUN = "template"

# 200 DAGs from one file: what `airflow dags reserialize` serialises.
DAG_FILE = f'''"""fenceline's bench/peer_growth.py: {DAGS} DAGs of {TASKS} chained tasks."""
from datetime import datetime

from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

for d in range({DAGS}):
    with DAG(dag_id=f"dag_{{d:03d}}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
        previous = None
        for k in range({TASKS}):
            task = BashOperator(task_id=f"t{{k}}", bash_command="true", retries=1)
            if previous is not None:
                previous >> task
            previous = task
'''

_KEEP_TEMPLATE = [
    "CREATE TABLE fenceline_template_run AS SELECT * FROM dag_run WHERE run_id = %(run)s",
    "CREATE TABLE fenceline_template_ti AS SELECT * FROM task_instance WHERE run_id = %(run)s",
    "DELETE FROM dag_run WHERE run_id = %(run)s",  # its task instances go with it (ON DELETE CASCADE)
]

# Run n (0 is the newest), its DAG and its time, as bench/seeding.py numbers them.
_RUN_SERIES = """
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n,
     LATERAL (SELECT 'dag_' || lpad((n %% {dags})::text, 3, '0') AS dag_id, 'r' || lpad(n::text, 9, '0') AS run_id,
                     %(now)s::timestamptz - n * interval '{spacing} seconds' AS created) AS r
     JOIN dag_version AS v ON v.dag_id = r.dag_id
"""

_RUNS = """
INSERT INTO dag_run (dag_id, queued_at, logical_date, start_date, end_date, state, run_id, run_type,
    triggered_by, triggering_user_name, conf, data_interval_start, data_interval_end, run_after,
    last_scheduling_decision, log_template_id, created_at, updated_at, clear_number, context_carrier,
    span_status, created_dag_version_id)
SELECT r.dag_id, r.created, r.created, r.created + interval '1 s',
       CASE WHEN n < {running} THEN NULL ELSE r.created + interval '5 min' END,
       CASE WHEN n < {running} THEN 'running' WHEN n %% 20 = 7 THEN 'failed' ELSE 'success' END,
       r.run_id, t.run_type, t.triggered_by, t.triggering_user_name, t.conf, r.created, r.created, r.created,
       r.created + interval '5 min', t.log_template_id, r.created, r.created + interval '5 min', 0,
       t.context_carrier, t.span_status, v.id
""" + _RUN_SERIES + """, fenceline_template_run AS t
"""

# Task k of run n is task instance m = n * TASKS + k; it has two tries when m's hash says so.
_TI_SERIES = _RUN_SERIES + """
     CROSS JOIN generate_series(0, {tasks} - 1) AS k
     JOIN fenceline_template_ti AS t ON t.task_id = 't' || k,
     LATERAL (SELECT n * {tasks} + k AS m,
                     CASE WHEN n < {running} THEN 0 WHEN ((n * {tasks} + k) * 7919) %% 100 < {retried} THEN 2
                          ELSE 1 END AS tries,
                     CASE WHEN n < {running} THEN 'scheduled' WHEN n %% 20 = 7 AND k = {tasks} - 1 THEN 'failed'
                          ELSE 'success' END AS state,
                     r.created + k * interval '20 s' AS queued) AS f
"""

# The scheduler sets try_number when it schedules; a finished try has its worker's host and pid.
_TIS = """
INSERT INTO task_instance (id, task_id, dag_id, run_id, map_index, start_date, end_date, duration, state,
    try_number, max_tries, hostname, unixname, pool, pool_slots, queue, priority_weight, operator,
    custom_operator_name, queued_dttm, scheduled_dttm, last_heartbeat_at, pid, executor_config, updated_at,
    context_carrier, span_status, task_display_name, dag_version_id)
SELECT md5('ti' || f.m)::uuid, t.task_id, r.dag_id, r.run_id, -1,
       CASE WHEN f.tries > 0 THEN f.queued + f.tries * interval '5 s' - interval '4 s' END,
       CASE WHEN f.tries > 0 THEN f.queued + f.tries * interval '5 s' + interval '10 s' END,
       CASE WHEN f.tries > 0 THEN 14.0 END, f.state, greatest(f.tries, 1), t.max_tries,
       CASE WHEN f.tries > 0 THEN 'worker-' || (f.m %% 8) ELSE '' END, t.unixname, t.pool, t.pool_slots,
       t.queue, t.priority_weight, t.operator, t.custom_operator_name,
       CASE WHEN f.tries > 0 THEN f.queued + f.tries * interval '5 s' - interval '5 s' END, f.queued,
       CASE WHEN f.tries > 0 THEN f.queued + f.tries * interval '5 s' + interval '10 s' END,
       CASE WHEN f.tries > 0 THEN 1000 + (f.m %% 30000)::int END, t.executor_config,
       f.queued + greatest(f.tries, 1) * interval '5 s' + interval '10 s', t.context_carrier, t.span_status,
       t.task_display_name, v.id
""" + _TI_SERIES

# The first of two tries, failed after 3 s, under the id the task instance had then.
_HISTORY = """
INSERT INTO task_instance_history (task_instance_id, task_id, dag_id, run_id, map_index, try_number,
    start_date, end_date, duration, state, max_tries, hostname, unixname, pool, pool_slots, queue,
    priority_weight, operator, custom_operator_name, queued_dttm, scheduled_dttm, pid, executor_config,
    updated_at, context_carrier, span_status, task_display_name, dag_version_id)
SELECT md5('tih' || f.m || '/1')::uuid, t.task_id, r.dag_id, r.run_id, -1, 1,
       f.queued + interval '1 s', f.queued + interval '4 s', 3.0, 'failed', t.max_tries, 'worker-' || (f.m %% 8),
       t.unixname, t.pool, t.pool_slots, t.queue, t.priority_weight, t.operator, t.custom_operator_name,
       f.queued, f.queued, 1000 + (f.m %% 30000)::int, t.executor_config, f.queued + interval '4 s',
       t.context_carrier, t.span_status, t.task_display_name, v.id
""" + _TI_SERIES + """
WHERE f.tries = 2
"""


def _sql(template: str) -> str:
    return template.format(dags=DAGS, tasks=TASKS, running=RUNNING, spacing=SPACING_SECONDS,
                           retried=RETRIED_PERCENT)


def keep_template(url: str) -> None:
    """Copy the run Airflow made (`TEMPLATE_RUN` of dag_000) and its task instances aside, then
    delete it, so that the database holds only seeded runs."""
    with psycopg.connect(url) as conn:
        for statement in _KEEP_TEMPLATE:
            conn.execute(statement, {"run": TEMPLATE_RUN})
        runs, tis = (conn.execute(f"SELECT count(*) FROM fenceline_template_{name}").fetchone()[0]
                     for name in ("run", "ti"))
    assert (runs, tis) == (1, TASKS), f"the template run has {runs} run(s) and {tis} task instances"


def seeded(url: str) -> int:
    """How many task instances the database holds."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM task_instance").fetchone()[0]


def seed(url: str, task_instances: int, now: str = "2026-12-01T00:00:00Z") -> int:
    """Grow the database at `url` (libpq) to `task_instances` task instances (whole runs) with
    older runs, as bench/seeding.seed does fenceline's; answers how many it added. VACUUM ANALYZE
    afterwards, as there."""
    first = seeded(url) // TASKS
    last = task_instances // TASKS - 1
    with psycopg.connect(url, autocommit=True) as conn:
        insert_runs(conn, first, last, now, [_sql(t) for t in (_RUNS, _TIS, _HISTORY)])
        for name in ("dag_run", "task_instance", "task_instance_history"):
            conn.execute(f"VACUUM ANALYZE {name}")
    return max(0, last + 1 - first) * TASKS


def expected_totals(task_instances: int, dag_id: str) -> dict[str, int]:
    """What the lists must answer as total_entries at `task_instances` seeded: the successful
    task instances, and `dag_id`'s task instances."""
    runs = range(task_instances // TASKS)
    return {"success": sum(TASKS - (n % 20 == 7) for n in runs if n >= RUNNING),
            "dag": TASKS * sum(1 for n in runs if f"dag_{n % DAGS:03d}" == dag_id)}


def size_per_task_instance(url: str) -> float:
    """The database's size on disk per task instance, in bytes."""
    with psycopg.connect(url) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return size / max(1, seeded(url))
