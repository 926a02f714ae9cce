"""The log store as routers meet it: the request's store (StoreDep), and the one place a store's
fault becomes an answer (installed by the app beside the kit's handlers)."""

import logging
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from app.logs.store import LogStore, LogStoreFault, LogStoreFull
from app.telemetry.metrics import log_store_errors
from app.web.deps import SAFE_METHODS
from app.web.problems import render

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
        if isinstance(exc, LogStoreFull):
            return render(request, 507, "log-store-full", "Log store full",
                          f"The log store has no room; nothing was written ({exc}).")
        if request.method in SAFE_METHODS:  # a read: nothing was sent yet (app/logs/service.py read)
            detail = f"The log store cannot be read now ({exc}). Retry later."
        else:
            detail = f"The log store cannot be used now; nothing was written ({exc}). Retry later."
        return render(request, 503, "log-store-unavailable", "Log store unavailable", detail,
                      headers={"Retry-After": "5"})
