"""HTTP for attempt logs: agent appends and the native read of a try's log."""

import uuid
from typing import ClassVar, Literal

from fastapi import Request
from fastapi.responses import StreamingResponse

from app.auth.deps import AttemptDep, OperatorDep
from app.execution.schemas import StaleReport
from app.logs import service
from app.logs.deps import StoreDep
from app.logs.schemas import LogAppend, LogAppended
from app.orchestration.runs import get_task_instance
from app.telemetry.metrics import log_bytes_appended
from app.web.deps import SessionDep, commit
from app.web.problems import problems, refusals
from app.web.routes import Router
from app.web.schemas import Problem

router = Router(tags=["logs"], responses=problems(401, 403, 422))


class LogWriteRefused(Problem):
    """An append the log store refused as it stands: `log-offset-gap` (409: the offset is past
    the stored end), `log-offset-conflict` (409: resent bytes differ), `log-too-large` or
    `payload-too-large` (413). `stored_size`, where given, is where to resend from."""

    STATUSES: ClassVar[tuple[int, ...]] = (409, 413)
    type: Literal["log-offset-gap", "log-offset-conflict", "log-too-large", "payload-too-large"]
    stored_size: int | None = None


# The body as a whole is bounded before it is read (app/web/ingress.py); its content, here.
@router.post("/v1/attempts/logs", responses={**problems(503, 507), **refusals(StaleReport, LogWriteRefused)})
def append_log(body: LogAppend, session: SessionDep, store: StoreDep, request: Request,
               token: AttemptDep) -> LogAppended:
    """Append to this attempt's own log stream; idempotent under retry (same offset, same bytes)."""
    settings = request.app.state.settings
    size = service.append(session=session, store=store, token=token, offset=body.offset, content=body.content,
                          max_request_bytes=settings.log_max_request_bytes,
                          max_attempt_bytes=settings.log_max_attempt_bytes)
    commit(session)
    log_bytes_appended.inc(len(body.content.encode()))
    return LogAppended(size=size)


@router.get("/v1/task-instances/{ti_id}/tries/{try_number}/log", response_class=StreamingResponse,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **problems(404)})
def read_try_log(ti_id: uuid.UUID, try_number: int, session: SessionDep, store: StoreDep,
                 _: OperatorDep) -> StreamingResponse:
    """The try's log: every epoch's stream in order, each behind one system line (streamed)."""
    log = service.try_log(session=session, store=store, ti=get_task_instance(session=session, ti_id=ti_id),
                          try_number=try_number)
    return StreamingResponse(service.read(store, log), media_type="text/plain; charset=utf-8")
