"""The log store as routers meet it: the request's store (StoreDep), and the one place a store's
fault becomes an answer (installed by the app beside the kit's handlers)."""

import logging
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from app.logs.service import fault_refusal
from app.logs.stores.base import LogStore, LogStoreFault
from app.telemetry.metrics import log_store_errors
from app.web.deps import SAFE_METHODS
from app.web.problems import render_error

log = logging.getLogger("fenceline")


async def log_store(request: Request) -> LogStore:
    return request.app.state.log_store


StoreDep = Annotated[LogStore, Depends(log_store)]


def install_fault_handler(app: FastAPI) -> None:
    """A LogStoreFault answers 507 log-store-full or 503 log-store-unavailable: on a write, the
    store recorded nothing, and an agent keeps its unshipped log and sends it again; on a read,
    nothing of the log was sent."""

    @app.exception_handler(LogStoreFault)
    async def _log_store_fault(request: Request, exc: LogStoreFault) -> JSONResponse:
        log.warning("log store %s on %s: %s", exc.reason, request.url.path, exc)
        log_store_errors.labels(reason=exc.reason).inc()
        return render_error(request, fault_refusal(exc, reading=request.method in SAFE_METHODS))
