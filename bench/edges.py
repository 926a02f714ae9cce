"""The concurrent-writers soak of issue 43 (contract 2.12): `python -m bench edges [--seconds N]`.

Against a real `fenceline serve --workers 2` on a throw-away PostgreSQL database, for N
seconds: two workers (two threads each) claim and report, in batches and alone; an operator
clears task instances, clears runs' failures, sweeps by hand and creates runs; the reaper sweeps
every half second; and a killer ends one of the server's database connections (a backend of
this benchmark's own database, never another's) every `--kill-every` seconds. The mix is
tests/support/mix.py's, which resends what a 503 or a lost connection refused, as an agent does.

Prints the requests by route and status, the deadlocks and serialization failures the server
met (run again, or refused), the connections ended, and the audit of the settles: every outcome
a 200 acknowledged is on its attempt's record, no record holds an agent's outcome no 200
acknowledged, no try ended twice, no attempt was handed out twice.
"""

import random
import threading
import time

import psycopg
from sqlalchemy import create_engine

from bench.common import Server
from tests.support.api import Operator
from tests.support.mix import audit, run_mix
from tests.support.scrape import sample

HEADERS = ["figure", "value"]
# One client backend of the benchmark's own database, never this connection's.
KILL_ONE = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend' ORDER BY random() LIMIT 1")


def killer(url: str, every: float, killed: list[int]):
    """An actor of the mix that ends one of the server's database connections every `every` seconds."""
    def run(stop: threading.Event) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(every * random.uniform(0.5, 1.5)):
                if conn.execute(KILL_ONE).fetchone():
                    killed.append(1)
    return run


def measure(seconds: float, kill_every: float) -> list[list[object]]:
    settings = {"infra_backoff_base_seconds": "0", "agent_lost_after_seconds": "1",
                "dispatch_lost_after_seconds": "2", "reaper_interval_seconds": "0.5"}
    killed: list[int] = []
    with Server("postgresql", "--workers", "2", **settings) as server, server.client() as client:
        operator = Operator(client)
        started = time.perf_counter()
        tally = run_mix(server.url, operator, seconds, extra=[killer(server.database_url, kill_every, killed)])
        elapsed = time.perf_counter() - started
        conflicts = {(kind, outcome): sample(operator, "fenceline_database_conflicts_total", kind=kind,
                                             outcome=outcome)
                     for kind in ("deadlock", "serialization") for outcome in ("retried", "refused")}
        engine = create_engine(server.database_url.replace("postgresql://", "postgresql+psycopg://"))
        wrong = audit(engine, tally)
        engine.dispose()
    statuses = tally.by_status()
    rows: list[list[object]] = [["seconds (measured)", elapsed],
                                ["requests", sum(statuses.values())]]
    rows += [[f"answers {status or 'lost (connection)'}", n] for status, n in sorted(statuses.items())]
    rows += [[f"  {route} {status or 'lost'}", n] for (route, status), n in sorted(tally.statuses.items())
             if status >= 400 or status == 0]
    rows += [[f"  {status} {kind}", n] for (status, kind), n in sorted(tally.problems.items())]
    rows += [["resent (after a 503 or a lost connection)", tally.resent],
             ["requests never answered past the resends", len(tally.unanswered)]]
    rows += [[f"{kind}s {outcome}", int(n)] for (kind, outcome), n in conflicts.items()]
    rows += [["database connections ended", len(killed)],
             ["attempts claimed", len(tally.claimed)],
             ["outcomes acknowledged (200)", len(tally.acknowledged)],
             ["audit: settles not exactly once", len(wrong)]]
    rows += [["  " + w, ""] for w in wrong[:10]]
    return rows
