"""Dependencies every router shares: the request's one transaction, in its kinds."""

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app.web.ingress import PARSED_JSON

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



async def json_object_body(request: Request) -> dict[str, Any]:
    """The request's body, a JSON object, as the ingress parsed it (off the event loop when it
    is large), for a route that takes a large body and must not parse it a second time. Such a
    route declares its body in `openapi_extra` (JSON_OBJECT_BODY)."""
    value = request.scope.get(PARSED_JSON)
    if value is None:  # malformed JSON (or a form): said as FastAPI says it
        body = await request.body()
        try:
            value = await anyio.to_thread.run_sync(json.loads, body)
        except ValueError as exc:
            raise RequestValidationError([{"loc": ("body",), "msg": f"JSON decode error: {exc}",
                                           "type": "json_invalid", "input": {}}]) from exc
    if not isinstance(value, dict):
        raise RequestValidationError([{"loc": ("body",), "msg": "Input should be a valid dictionary",
                                       "type": "dict_type", "input": value}])
    return value


JsonObjectDep = Annotated[dict[str, Any], Depends(json_object_body)]
JSON_OBJECT_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"type": "object", "additionalProperties": True, "title": "Document"}}}}}
