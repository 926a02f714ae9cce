"""Dependencies every router shares: the request's one transaction, and the log store."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from app.logs.store import LogStore

SAFE_METHODS = ("GET", "HEAD")


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request, committed when the endpoint returns, before the
    response is sent: a failed commit becomes a 5xx, never a 200 for a lost write. GET and
    HEAD read in a read-only transaction (app/db.py `reading`)."""
    state = request.app.state
    engine = state.read_engine if request.method in SAFE_METHODS else state.engine
    with Session(engine, expire_on_commit=False) as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def log_store(request: Request) -> LogStore:
    return request.app.state.log_store


StoreDep = Annotated[LogStore, Depends(log_store)]
