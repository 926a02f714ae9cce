"""A year of history in seconds: task instances seeded straight into a migrated PostgreSQL
database with set-based SQL (INSERT … SELECT generate_series), in the shape issue 45 measured:
200 DAGs, runs of ten task instances, 1.27 tries per task instance (each try with its history
row and its attempt record), one run every 52 s going back in time (60 days at a million task
instances). The newest RUNNING runs are still running, their task instances ready to claim.

`seed(url, n)` grows the database to n task instances by adding older runs, so one database
can be measured at 10k, then grown to 1M and measured again.
"""

import psycopg
from sqlmodel import Session

from app.db.dialect import with_driver
from app.db.engine import make_engine
from app.orchestration.counts import fold_counts

DAGS, TASKS = 200, 10
RUNNING = 100  # the newest runs: running, their task instances scheduled
SPACING_SECONDS = 60 * 86400 / 100_000  # 60 days over the runs of a million task instances
RETRIED_PERCENT = 27  # task instances with a second try
CHUNK_RUNS = 20_000  # runs per statement: bounded transactions and WAL

# Run n (0 is the newest) and its task instance k: ids derived from the numbers, so each table
# is seeded by one statement without reading the ones before.
_RUNS = """
INSERT INTO dag_runs (id, dag_id, run_id, state, trace_id, conf, created_at, ended_at, updated_at)
SELECT md5('run' || n)::uuid, 'dag_' || lpad((n %% {dags})::text, 3, '0'), 'r' || lpad(n::text, 9, '0'),
       CASE WHEN n < {running} THEN 'running' WHEN n %% 20 = 7 THEN 'failed' ELSE 'success' END,
       md5('trace' || n), '{{}}', t.created, CASE WHEN n < {running} THEN NULL ELSE t.created + interval '5 min' END,
       t.created + interval '5 min'
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n,
     LATERAL (SELECT %(now)s::timestamptz - n * interval '{spacing} seconds' AS created) AS t
"""

# The task instance's numbers: run n, task k, m = n * TASKS + k; retried when m's hash says so.
_TI_SERIES = """
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n, generate_series(0, {tasks} - 1) AS k,
     LATERAL (SELECT n * {tasks} + k AS m, %(now)s::timestamptz - n * interval '{spacing} seconds' AS created) AS t,
     LATERAL (SELECT CASE WHEN n < {running} THEN 0 WHEN (t.m * 7919) %% 100 < {retried} THEN 2 ELSE 1 END AS tries,
                     CASE WHEN n < {running} THEN 'scheduled' WHEN n %% 20 = 7 AND k = {tasks} - 1 THEN 'failed'
                          ELSE 'success' END AS state) AS f
"""

_TIS = """
INSERT INTO task_instances (id, dag_run_id, dag_id, run_id, task_id, map_index, payload, upstream_task_ids,
    has_downstream, retries, retry_delay_seconds, max_infra_attempts, idempotent, queue, pool, pool_slots,
    priority_weight, state, try_number, max_tries, attempt_epoch, infra_attempts, user_code_started,
    queued_at, started_at, ended_at, created_at, updated_at)
SELECT md5('ti' || t.m)::uuid, md5('run' || n)::uuid, 'dag_' || lpad((n %% {dags})::text, 3, '0'),
       'r' || lpad(n::text, 9, '0'), 't' || k, -1, '{{"command": ["true"]}}',
       (CASE WHEN k = 0 THEN '[]' ELSE '["t' || (k - 1) || '"]' END)::json, k < {tasks} - 1, 1, 0, 3, true,
       'default', 'default_pool', 1, 1, f.state, greatest(f.tries, 1), 1, f.tries, 0, f.tries > 0,
       CASE WHEN f.tries > 0 THEN t.created + k * interval '20 s' END,
       CASE WHEN f.tries > 0 THEN t.created + k * interval '20 s' + interval '1 s' END,
       CASE WHEN f.tries > 0 THEN t.created + k * interval '20 s' + interval '15 s' END,
       t.created, t.created + k * interval '20 s' + interval '15 s'
""" + _TI_SERIES

# One history row and one attempt record per try of a finished task instance: the first of two
# tries failed; the last try ended as its task instance did.
_TRIES = """
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS n, generate_series(0, {tasks} - 1) AS k,
     LATERAL (SELECT n * {tasks} + k AS m, %(now)s::timestamptz - n * interval '{spacing} seconds' AS created) AS t,
     LATERAL (SELECT CASE WHEN (t.m * 7919) %% 100 < {retried} THEN 2 ELSE 1 END AS tries,
                     CASE WHEN n %% 20 = 7 AND k = {tasks} - 1 THEN 'failed' ELSE 'success' END AS state) AS f,
     generate_series(1, f.tries) AS try,
     LATERAL (SELECT CASE WHEN try < f.tries THEN 'failed' ELSE f.state END AS state,
                     t.created + k * interval '20 s' + (try - 1) * interval '5 s' AS began) AS a
WHERE n >= {running}
"""

_HISTORY = """
INSERT INTO task_instance_history (id, task_instance_id, try_number, attempt_epoch, state, infra_attempts,
    queued_at, started_at, ended_at)
SELECT md5('tih' || t.m || '/' || try)::uuid, md5('ti' || t.m)::uuid, try, try, a.state, 0,
       a.began, a.began + interval '1 s', a.began + interval '4 s'
""" + _TRIES

_ATTEMPTS = """
INSERT INTO task_attempts (id, task_instance_id, try_number, attempt_epoch, state, outcome_kind,
    user_code_started, claimed_at, started_at, ended_at)
SELECT md5('ta' || t.m || '/' || try)::uuid, md5('ti' || t.m)::uuid, try, try, a.state,
       CASE WHEN a.state = 'success' THEN 'success' ELSE 'app' END, true,
       a.began, a.began + interval '1 s', a.began + interval '4 s'
""" + _TRIES


def _sql(template: str) -> str:
    return template.format(dags=DAGS, tasks=TASKS, running=RUNNING, spacing=SPACING_SECONDS,
                           retried=RETRIED_PERCENT)


def seeded(url: str) -> int:
    """How many task instances the database holds."""
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM task_instances").fetchone()[0]


def insert_runs(conn: psycopg.Connection, first: int, last: int, now: str, statements: list[str]) -> None:
    """Runs `first` to `last` by `statements` (each bound to first, last and now), CHUNK_RUNS
    runs to a transaction."""
    for start in range(first, last + 1, CHUNK_RUNS):
        bounds = {"first": start, "last": min(last, start + CHUNK_RUNS - 1), "now": now}
        with conn.transaction():
            for statement in statements:
                conn.execute(statement, bounds)


def seed(url: str, task_instances: int, now: str = "2026-12-01T00:00:00Z") -> int:
    """Grow the database at `url` (a libpq URL, migrated) to `task_instances` task instances
    (rounded down to whole runs) with older runs; answers how many it added. The kept counts'
    deltas folded and VACUUM ANALYZE afterwards, so that the counts, index-only scans and the
    planner see the new rows as a day of service would have left them."""
    first = seeded(url) // TASKS
    last = task_instances // TASKS - 1
    with psycopg.connect(url, autocommit=True) as conn:
        insert_runs(conn, first, last, now, [_sql(t) for t in (_RUNS, _TIS, _HISTORY, _ATTEMPTS)])
    fold(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for name in ("dag_runs", "task_instances", "task_instance_history", "task_attempts", "task_instance_counts",
                     "task_instance_count_deltas"):
            conn.execute(f"VACUUM ANALYZE {name}")
    return max(0, last + 1 - first) * TASKS


def fold(url: str) -> None:
    """Fold the kept counts' deltas the seeding appended, as the reaper's next sweep would."""
    engine = make_engine(with_driver(url))
    try:
        with Session(engine) as session:
            fold_counts(session=session)
            session.commit()
    finally:
        engine.dispose()


def size_per_task_instance(url: str) -> float:
    """The database's size on disk per task instance, in bytes."""
    with psycopg.connect(url) as conn:
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return size / max(1, seeded(url))
