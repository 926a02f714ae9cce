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
from starlette.concurrency import run_in_threadpool


def in_threadpool(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` as a coroutine function that runs it in the threadpool (its signature, which
    FastAPI reads, is the endpoint's own)."""

    @functools.wraps(endpoint)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(endpoint, *args, **kwargs)
    return threaded


class Route(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            endpoint = in_threadpool(endpoint)
        super().__init__(path, endpoint, **kwargs)


class Router(APIRouter):
    """FastAPI's APIRouter whose routes are Routes (or a Route subclass of the caller's)."""

    def __init__(self, *, route_class: type[Route] = Route, **kwargs: Any) -> None:
        super().__init__(route_class=route_class, **kwargs)
