"""The background loops of one process outlive a database outage (issue 30, item 1): the
database goes away for longer than a sweep interval (a TCP proxy in front of it is cut), comes
back, and the reaper's next sweep marks while the wake-up listener listens again, without a
restart."""

import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, make_url, text

from app.execution.reapers import LEADER_LOCK_KEY
from tests.support.api import Worker, task
from tests.support.tcp_proxy import TcpProxy

INTERVAL = 0.2  # the reaper's sweep interval in these tests
OUTAGE = 10 * INTERVAL  # longer than a sweep interval: several sweeps fail while it lasts
BACK_WITHIN = 15.0  # how long the loops may take to be back once the database is (seconds)


def until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def leader_lock_held(engine: Engine) -> bool:
    """Whether some session of this database holds the reaper's leader lock."""
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND ((classid::bigint << 32) | objid::bigint) = :key"), {"key": LEADER_LOCK_KEY}).scalar())


@pytest.fixture
def proxy(db_url: str) -> Iterator[TcpProxy]:
    if not db_url.startswith("postgresql"):
        pytest.skip("a SQLite file cannot become unreachable")
    url = make_url(db_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        yield proxy


@pytest.fixture
def behind_proxy(db_url: str, proxy: TcpProxy, make_client):
    """A second server on the same database, reaching it through `proxy`, sweeping every
    INTERVAL and taking a claim never reported running for lost after 0.3 s."""
    url = make_url(db_url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    return make_client(database_url=url, reaper_interval_seconds=INTERVAL, dispatch_lost_after_seconds=0.3)


class TestDatabaseOutage:
    def test_the_next_sweep_after_the_outage_marks(self, proxy, behind_proxy, operator, engine):
        assert until(lambda: leader_lock_held(engine), BACK_WITHIN), "the reaper never took the lead"
        proxy.cut()
        assert until(lambda: not leader_lock_held(engine), BACK_WITHIN)
        time.sleep(OUTAGE)  # sweeps fail on the lost connection, and reconnecting fails
        proxy.restore()
        operator.create_run(task("a"))
        attempt = Worker(operator).claim_one()  # queued, never reported running: dispatch-lost
        assert until(lambda: operator.ti(attempt.ti_id)["last_failure_reason"] == "dispatch_lost", BACK_WITHIN), \
            "the reaper did not come back after the database did"
        assert leader_lock_held(engine)

    def test_the_wake_up_listener_listens_again(self, proxy, behind_proxy):
        hub = behind_proxy.app.state.wakeups
        assert until(lambda: hub.hearing, BACK_WITHIN)
        proxy.cut()
        assert until(lambda: not hub.hearing, BACK_WITHIN)
        time.sleep(OUTAGE)
        proxy.restore()
        assert until(lambda: hub.hearing, BACK_WITHIN)
