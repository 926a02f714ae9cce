"""Prometheus metrics (contract 8), served at /metrics by app/ops/health.py; the table of them
is in docs/operations.md.

Counters and histograms live in prometheus-client's default registry. Under `serve --workers N`
every process writes its values to files in PROMETHEUS_MULTIPROC_DIR and the process that
answers a scrape sums them (prometheus-client's multiprocess mode): app/telemetry/multiprocess.py
`prepare_multiprocess` sets that up before the first process imports this module. What is read
from the database (task instances by state) is computed at scrape time by a collector of
app/ops/health.py, so it never drifts; the pool's figures are gauges each process sets on
checkout and check-in.
"""

import gc
import os
import time
from collections.abc import Iterable
from itertools import product
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import Engine, event

from app.telemetry.multiprocess import MULTIPROC_ENV
from app.telemetry.tracing import BATCH_OPS, batch_op


def zeroed(metric: Counter | Histogram, **values: Iterable[str]) -> None:
    """A series at 0 for every combination of the label values given (known before their first
    event), so that `increase()` and `rate()` see that event, and an alert on a series that
    never moved has one to read. The domain that knows a label's values calls this; label
    values no one can know ahead (a route, a swarm before its first admission) start at their
    first event."""
    names = list(values)
    for combination in product(*(values[name] for name in names)):
        metric.labels(**dict(zip(names, combination, strict=True)))

# --- named by the contract (1.3, 3.4): unchanged -----------------------------------------------
execution_identity_conflicts = Counter(
    "execution_identity_conflicts",
    "Refusals of execution admission, binding and seat writes, by swarm and reason.",
    ["swarm", "reason"],
)
agent_legacy_attempt_tokens = Counter(
    "agent_legacy_attempt_token",
    "Agent calls made with a claim-less (legacy) attempt token, without attempt_epoch.",
)

# --- HTTP ------------------------------------------------------------------------------------
# Latency buckets for an API whose writes take milliseconds and whose waits take seconds.
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
http_requests = Counter(
    "fenceline_http_requests",
    "HTTP requests answered, by method, route template (`unmatched` for no route) and status.",
    ["method", "route", "status"],
)
http_request_duration = Histogram(
    "fenceline_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by method, route template and status, less "
    "the time a waiting claim waited for work (that is fenceline_claim_wait_seconds).",
    ["method", "route", "status"], buckets=LATENCY_BUCKETS,
)

# --- execution -------------------------------------------------------------------------------
claims = Counter("fenceline_claims", "Claim requests answered (POST /v1/dispatch/claim), work found or not.")
claimed_task_instances = Counter("fenceline_claimed_task_instances", "Task instances handed out by claims.")
claim_wait = Histogram(
    "fenceline_claim_wait_seconds",
    "Time waiting claims (wait_seconds > 0) spent waiting for work, by whether work came (claimed) or the "
    "wait ran out (empty); a claim that found work at once is not counted.",
    ["outcome"], buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0),
)
zeroed(claim_wait, outcome=("claimed", "empty"))


claims_in_flight = Gauge("fenceline_claims_in_flight",
                         "Claims being answered now, waiting ones included.", multiprocess_mode="livesum")


def count_claim(handed_out: int, waited: float) -> None:
    claims.inc()
    if handed_out:
        claimed_task_instances.inc(handed_out)
    if waited > 0:
        claim_wait.labels("claimed" if handed_out else "empty").observe(waited)


reports = Counter(
    "fenceline_reports",
    "Agent reports accepted by the fence, by the state or outcome reported (running, success, failed, "
    "unexecutable, rescheduled).",
    ["outcome"],
)
stale_reports = Counter(
    "fenceline_stale_reports",
    "Agent writes refused as stale (409 stale-report, should_terminate), by route template.",
    ["route"],
)
reaper_sweep_duration = Histogram(
    "fenceline_reaper_sweep_duration_seconds",
    "Duration of the reaper sweeps this server ran (a sweep another replica held is not counted).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
reaper_marks = Counter(
    "fenceline_reaper_marks",
    "In-flight attempts the reapers routed as unexecutable, by reason.",
    ["reason"],
)

database_conflicts = Counter(
    "fenceline_database_conflicts",
    "Transactions the database rolled back for a conflict between concurrent writers, by kind (deadlock, "
    "serialization) and outcome: retried (run again, whole), or refused (it persisted: answered 503 "
    "database-conflict, or a sweep left to its next interval).",
    ["kind", "outcome"],
)
zeroed(database_conflicts, kind=("deadlock", "serialization"), outcome=("retried", "refused"))


def count_conflict(kind: str, retried: bool) -> None:
    """A conflict app/db/retries.py met: run again, or refused."""
    database_conflicts.labels(kind, "retried" if retried else "refused").inc()


# --- logs, tokens ------------------------------------------------------------------------------
batch_entries = Counter("fenceline_batch_entries", "Entries of POST /v1/attempts/batch answered, by op and status.",
                        ["op", "status"])
zeroed(batch_entries, op=BATCH_OPS, status=("200", "409"))


def count_batch(entries: list[dict[str, Any]], results: list[Any]) -> None:
    """A batch's entries, each counted as its single request is (reports, stale writes) and by op."""
    for entry, result in zip(entries, results, strict=True):
        op = batch_op(entry)
        batch_entries.labels(op, str(result.status)).inc()
        if result.status == 200 and op == "report":
            reports.labels(entry.get("state")).inc()
        elif result.body.get("type") == "stale-report":
            stale_reports.labels("/v1/attempts/batch").inc()


log_bytes_appended = Counter(
    "fenceline_log_bytes_appended",
    "Bytes of attempt-log appends the log store accepted (a resent append counts again).",
)
log_store_errors = Counter(
    "fenceline_log_store_errors",
    "Log store operations refused because the store was full or unavailable (answered 507 or 503), by "
    "reason: the errno name for the file store (enospc, erofs, eio, ...), database_* or bucket_* for the others.",
    ["reason"],
)
tokens_without_audience = Counter(
    "fenceline_tokens_without_audience",
    "Tokens minted before tokens named their issuer and audience, accepted within the grace period, by kind.",
    ["kind"],
)

# --- HTTP connections (per process; summed over the live processes) ------------------------
http_connections_open = Gauge("fenceline_http_connections_open",
                              "HTTP connections open now (each holds a file descriptor: waiting claims included).",
                              multiprocess_mode="livesum")
http_heads_refused = Counter("fenceline_http_heads_refused",
                             "Request heads refused before routing: too large (431) or not finished in time "
                             "(timeout), by reason.", ["reason"])
zeroed(http_heads_refused, reason=("too_large", "timeout"))

# --- the database pool (per process; summed over the live processes of a multi-process server) --
db_pool_in_use = Gauge("fenceline_db_pool_connections_in_use", "Database connections checked out of the pool.",
                       multiprocess_mode="livesum")
db_pool_overflow = Gauge("fenceline_db_pool_overflow_connections",
                         "Connections open beyond the pool's size (FENCELINE_DATABASE_MAX_OVERFLOW bounds them).",
                         multiprocess_mode="livesum")


def watch_pool(engine: Engine) -> None:
    """Keep the pool gauges current as connections are checked out and in."""
    pool = engine.pool

    def _update(*_: object) -> None:
        db_pool_in_use.set(pool.checkedout())
        db_pool_overflow.set(max(0, pool.overflow()))

    event.listen(pool, "checkout", _update)
    event.listen(pool, "checkin", _update)


# --- the process's garbage collector ---------------------------------------------------------
gc_pauses = Histogram("fenceline_gc_pause_seconds",
                      "Garbage-collector pauses of the server's processes, by generation: every request waits "
                      "through one.", ["generation"],
                      buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))


def watch_gc() -> None:
    """Time each collection of this process's garbage collector into gc_pauses (gc.callbacks):
    a full collection holds every thread, so long ones are a tail of every route at once."""
    by_generation = [gc_pauses.labels(generation=str(g)) for g in range(3)]
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            by_generation[info["generation"]].observe(time.perf_counter() - started[0])

    gc.callbacks.append(timed)


class Recorded(Collector):
    """What this process (or, in multiprocess mode, every process of the server) recorded."""

    def collect(self) -> Iterable[Metric]:
        directory = os.environ.get(MULTIPROC_ENV)
        if directory:
            return multiprocess.MultiProcessCollector(CollectorRegistry(), path=directory).collect()
        return REGISTRY.collect()


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    return generate_latest(registry), CONTENT_TYPE_LATEST


def process_exited(pid: int | None = None) -> None:
    """Drop an exiting process's live gauges from a multi-process server's sums."""
    if os.environ.get(MULTIPROC_ENV):
        multiprocess.mark_process_dead(pid or os.getpid())
