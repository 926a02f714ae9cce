"""Every router of the app (`Router`) and its route class: one thread hop per request to a
plain `def` endpoint.

FastAPI runs a `def` endpoint in its threadpool, and then validates what it answered against
the response model in the threadpool as well: two hops per request (each a queue put, a thread
wake-up and a loop wake-up; docs/performance.md). A Route runs such an endpoint in the
threadpool itself, from an `async` wrapper, so FastAPI checks and serialises the answer on the
event loop, where that pure CPU costs less than the hop.
"""

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.db.retries import retried
from app.telemetry.metrics import count_conflict


def in_threadpool(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` as a coroutine function that runs it in the threadpool (its signature, which
    FastAPI reads, is the endpoint's own), run again whole after a conflict between concurrent
    writers that rolled its transaction back (retrying)."""

    @functools.wraps(endpoint)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(retrying, endpoint, *args, **kwargs)
    return threaded


def retrying(endpoint: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`endpoint(*args, **kwargs)`, run again (app/db/retries.py) after a deadlock or a
    serialization failure rolled back the transaction of its sessions: its body is parsed
    already, and what it does beside the database (metrics, spans, the log store's uploads,
    which the index names only once committed) comes after its commit or is harmless twice."""
    sessions = [value for value in (*args, *kwargs.values()) if isinstance(value, Session)]
    if not sessions:
        return endpoint(*args, **kwargs)
    return retried(sessions, lambda: endpoint(*args, **kwargs), seen=count_conflict)


class Route(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = in_threadpool(endpoint)
        super().__init__(path, endpoint, **kwargs)


class Router(APIRouter):
    """FastAPI's APIRouter whose routes are Routes (or a Route subclass of the caller's)."""

    def __init__(self, *, route_class: type[Route] = Route, **kwargs: Any) -> None:
        super().__init__(route_class=route_class, **kwargs)
