"""Dependencies every router shares: the request's one transaction, in its kinds."""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

SAFE_METHODS = ("GET", "HEAD")


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One transaction per request, committed when the endpoint returns, before the
    response is sent: a failed commit becomes a 5xx, never a 200 for a lost write. GET and
    HEAD read in a read-only transaction (app/db/engine.py `reading`).

    Opening a session touches no connection, so it happens on the event loop; only a
    transaction the endpoint left open costs a thread hop to commit (or roll back). A hot
    endpoint commits in its own thread (`commit`), sparing the hop (docs/performance.md)."""
    state = request.app.state
    engine = state.read_engine if request.method in SAFE_METHODS else state.engine
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
        if session.in_transaction():
            await run_in_threadpool(session.commit)
    except BaseException:
        if session.in_transaction():
            await run_in_threadpool(session.rollback)
        raise
    finally:
        session.close()  # no transaction is left open here: nothing to send


def commit(session: Session) -> None:
    """Commit the request's transaction now, in the endpoint's own thread: the session
    dependency then has nothing left to do (a failed commit is the endpoint's 5xx)."""
    session.commit()


SessionDep = Annotated[Session, Depends(get_session, scope="function")]


async def get_single_statement_session(request: Request) -> AsyncIterator[Session]:
    """A session whose every statement commits on its own (app/db/engine.py `single_statements`), for
    an endpoint that writes at most once: one database round trip instead of three."""
    session = Session(request.app.state.single_statement_engine, expire_on_commit=False)
    try:
        yield session
    finally:
        session.close()


SingleStatementDep = Annotated[Session, Depends(get_single_statement_session, scope="function")]

