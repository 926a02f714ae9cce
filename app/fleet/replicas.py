"""The replica registry (contract 10.2): each server process records itself, says it is alive
every few seconds, and is forgotten once long gone; `fenceline migrate --contract` asks it
whether a replica of an older head is alive."""

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, insert, select, update
from sqlmodel import Session

from app.db.types import utcnow
from app.fleet.models import Replica

log = logging.getLogger("fenceline.replicas")
REPLICAS = Replica.__table__
LIVENESS_HEARTBEATS = 4  # a replica is alive until it missed this many heartbeats in a row
FORGOTTEN_AFTER = timedelta(hours=1)  # rows of replicas not seen for this long are deleted


@dataclass(frozen=True)
class Me:
    """This process as the registry lists it."""

    id: uuid.UUID
    version: str
    head: str
    started_at: datetime
    liveness_seconds: int

    @classmethod
    def starting(cls, version: str, head: str, heartbeat_seconds: float) -> "Me":
        return cls(uuid.uuid4(), version, head, utcnow(), max(1, round(heartbeat_seconds * LIVENESS_HEARTBEATS)))


def seen(*, session: Session, me: Me, now: datetime) -> None:
    """Record that `me` is alive now (its row made again if it was forgotten meanwhile), and
    forget replicas not seen for FORGOTTEN_AFTER."""
    if session.execute(update(REPLICAS).where(REPLICAS.c.id == me.id).values(last_seen_at=now)).rowcount == 0:
        session.execute(insert(REPLICAS).values(
            id=me.id, version=me.version[:64], head=me.head, host=socket.gethostname()[:255], pid=os.getpid(),
            started_at=me.started_at, last_seen_at=now, liveness_seconds=me.liveness_seconds))
    session.execute(delete(REPLICAS).where(REPLICAS.c.last_seen_at < now - FORGOTTEN_AFTER))


def gone(*, session: Session, me: Me) -> None:
    """`me` stopped: no longer listed (nor waited for by a contract step)."""
    session.execute(delete(REPLICAS).where(REPLICAS.c.id == me.id))


def listing(*, session: Session) -> list[Replica]:
    """Every replica recorded, the most recently started first."""
    return list(session.scalars(select(Replica).order_by(Replica.started_at.desc(), Replica.id)))


def alive(replica: Replica, now: datetime) -> bool:
    return replica.last_seen_at + timedelta(seconds=replica.liveness_seconds) > now


class Heartbeat:
    """This replica's record, kept fresh on a thread of its own every `interval` seconds."""

    def __init__(self, engine: Engine, me: Me, interval: float) -> None:
        self.engine, self.me, self.interval = engine, me, interval
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fenceline-replica-heartbeat", daemon=True)

    def start(self) -> None:
        self._beat()  # listed before the first request is served
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)
        try:
            with Session(self.engine) as session:
                gone(session=session, me=self.me)
                session.commit()
        except Exception:  # the row expires by itself
            log.warning("could not remove this replica's record", exc_info=True)

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            self._beat()

    def _beat(self) -> None:
        try:
            with Session(self.engine) as session:
                seen(session=session, me=self.me, now=utcnow())
                session.commit()
        except Exception:  # a missed heartbeat must not stop the next one
            log.warning("replica heartbeat failed", exc_info=True)
