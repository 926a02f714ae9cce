"""The operator dashboard (/ui): server-rendered pages over the same service reads as the API.

Every page but the login form and the stylesheet needs the operator cookie (app/ui/access.py).
Templates autoescape everything; pages refresh themselves while something is still running.
"""

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from fastapi import Depends, Form, Query, Request
from fastapi.responses import FileResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from app.auth.deps import check_password, operator_token, remember_device
from app.db.types import utcnow
from app.errors import AppError
from app.logs import service as logs
from app.logs.deps import StoreDep
from app.orchestration import runs, states
from app.orchestration.models import TaskInstance
from app.ui import access, actions, graph, timeline, views
from app.ui.access import UiOperatorDep
from app.web.deps import SessionDep, commit
from app.web.routes import Router

HERE = Path(__file__).parent
REFRESH_SECONDS = 5
# What /ui/static serves, open without a login like the login form that needs it.
STATIC = {"ui.css": "text/css", "tail.js": "text/javascript"}


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "—"


def _duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    seconds = max(0.0, (end - start).total_seconds())
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}min"


def _segment(value: Any) -> str:
    """One URL path segment, with '/' and everything else reserved percent-encoded."""
    return quote(str(value), safe="")


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}min ago" if seconds < 7200 else \
        f"{seconds / 3600:.1f}h ago"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=True)
env.filters.update(ts=_ts, seg=_segment, size=_size, age=_age, short=lambda v: str(v)[:8] if v else "—")
env.globals.update(duration=_duration, FINISHED=states.FINISHED, IN_FLIGHT=states.IN_FLIGHT,
                   tail_kib=views.LOG_TAIL_BYTES // 1024, KIND_TEXT=timeline.KIND_TEXT,
                   G=graph, T=timeline, refresh_seconds=REFRESH_SECONDS)  # the layouts' sizes
templates = Jinja2Templates(env=env)


def page(request: Request, name: str, status_code: int = 200, refresh: bool = False, **context: Any) -> Response:
    context.setdefault("operator", access.operator_from_cookie(request))
    return templates.TemplateResponse(request, name, {"refresh": REFRESH_SECONDS if refresh else None, **context},
                                      status_code=status_code)


def error_page(request: Request, status: int, title: str, detail: str) -> Response:
    return page(request, "error.html", status_code=status, title=title, detail=detail)


router = Router(prefix="/ui", include_in_schema=False, route_class=access.ui_route(error_page))


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse(access.HOME_PATH, status_code=303)


@router.get("/static/{name}")
def static(request: Request, name: str) -> Response:
    if name not in STATIC:
        return error_page(request, 404, "Not found", "No such page.")
    return FileResponse(HERE / "static" / name, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


# --- login ----------------------------------------------------------------------------------

@router.get("/login")
def login_form(request: Request, next: str | None = None) -> Response:
    if access.operator_from_cookie(request) is not None:
        return RedirectResponse(access.safe_next(next), status_code=303)
    return page(request, "login.html", next=access.safe_next(next), error=None, username="")


@router.post("/login", dependencies=[Depends(access.same_origin)])
def login(request: Request, username: Annotated[str, Form()] = "", password: Annotated[str, Form()] = "",
          next: Annotated[str, Form()] = "") -> Response:
    """Check the operator's credentials as POST /auth/token does; set the session cookie."""
    try:
        check_password(request, username, password)
    except AppError as refusal:
        again = page(request, "login.html", status_code=400 if refusal.status == 401 else refusal.status,
                     operator=None, next=access.safe_next(next), error=refusal.detail, username=username)
        again.headers.update(refusal.headers)
        return again
    response = RedirectResponse(access.safe_next(next), status_code=303)
    access.set_session_cookie(response, request, operator_token(request, username))
    remember_device(request, response, username)
    return response


@router.post("/logout", dependencies=[Depends(access.same_origin)])
def logout() -> Response:
    """Drop the cookie. The token itself stays valid until it expires (tokens are stateless)."""
    response = RedirectResponse(access.LOGIN_PATH, status_code=303)
    access.clear_session_cookie(response)
    return response


# --- pages ----------------------------------------------------------------------------------

RUN_STATES = ("running", "success", "failed")


def _when(name: str, value: str) -> datetime | None:
    """A time from the runs list's form (`datetime-local`: no offset, read as UTC); None if blank."""
    if not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise AppError(400, "invalid-filter", "Bad filter", f"{name}: {value!r} is not a date and time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@router.get("/runs")
def runs_list(request: Request, session: SessionDep, operator: UiOperatorDep, dag_id: str = "", state: str = "",
              run_id: str = "", created_from: str = "", created_to: str = "",
              offset: Annotated[int, Query(ge=0)] = 0) -> Response:
    """The runs, newest first: of a DAG, in a state, created in a time range, searched by run id."""
    if state and state not in RUN_STATES:
        raise AppError(400, "invalid-filter", "Bad filter", f"state: {state!r} is none of {', '.join(RUN_STATES)}")
    filters = {"dag_id": dag_id, "state": state, "run_id": run_id, "created_from": created_from,
               "created_to": created_to}
    rows, total = views.run_rows(session=session, offset=offset, dag_id=dag_id or None, state=state or None,
                                 run_id_contains=run_id, created_from=_when("created_from", created_from),
                                 created_to=_when("created_to", created_to))
    return page(request, "runs.html", operator=operator, refresh=any(r.run.state == "running" for r in rows),
                rows=rows, total=total, offset=offset, per_page=views.RUNS_PER_PAGE, counted=views.RUNS_COUNTED,
                dag_id=dag_id,
                filters=filters, query=urlencode({k: v for k, v in filters.items() if v}), states=RUN_STATES,
                charts=views.outcome_charts(session=session, now=utcnow()))


# run_id as a path parameter: a decoded %2F must still reach the route (dag_id is an Ident).
@router.get("/runs/{dag_id}/{run_id:path}")
def run_detail(request: Request, dag_id: str, run_id: str, session: SessionDep, operator: UiOperatorDep,
               view: Literal["grid", "graph", "timeline"] = "grid") -> Response:
    """The run as a task grid, a graph or an epoch timeline (?view=)."""
    run, tis = views.run_page(session=session, dag_id=dag_id, run_id=run_id)
    counts = {state: sum(1 for ti in tis if ti.state == state) for state in states.ALL}
    shown: dict[str, Any] = {}
    if view == "graph":
        shown["graph"] = views.run_graph(tis)
    elif view == "timeline":
        shown["tl"] = views.run_timeline(session=session, run=run, tis=tis, now=utcnow())
    return page(request, "run.html", operator=operator, refresh=run.state == "running", run=run, tis=tis,
                counts={k: v for k, v in counts.items() if v}, view=view, **shown)


@router.get("/task-instances/{ti_id}")
def task_instance(request: Request, ti_id: uuid.UUID, session: SessionDep, operator: UiOperatorDep) -> Response:
    ti, tries = views.task_instance_page(session=session, ti_id=ti_id)
    return page(request, "task_instance.html", operator=operator, refresh=ti.state not in states.FINISHED,
                ti=ti, tries=tries)


@router.get("/task-instances/{ti_id}/tries/{try_number}/log")
def try_log_page(request: Request, ti_id: uuid.UUID, try_number: int, session: SessionDep, store: StoreDep,
                 operator: UiOperatorDep) -> Response:
    view = views.log_page(session=session, store=store, ti_id=ti_id, try_number=try_number)
    return page(request, "log.html", operator=operator, view=view, ti=view.ti)


@router.get("/task-instances/{ti_id}/tries/{try_number}/log/tail")
def try_log_tail(ti_id: uuid.UUID, try_number: int, session: SessionDep, store: StoreDep, _: UiOperatorDep,
                 offset: Annotated[int, Query(ge=0)]) -> dict[str, Any]:
    """The live tail's source (static/tail.js): the whole lines from byte `offset` on."""
    return views.log_tail(session=session, store=store, ti_id=ti_id, try_number=try_number, offset=offset)


@router.get("/task-instances/{ti_id}/tries/{try_number}/log.txt")
def try_log_text(ti_id: uuid.UUID, try_number: int, session: SessionDep, store: StoreDep,
                 _: UiOperatorDep) -> StreamingResponse:
    """The whole log as GET /v1/…/log serves it (streamed), for a cookie-authenticated operator."""
    log = logs.try_log(session=session, store=store, ti=runs.get_task_instance(session=session, ti_id=ti_id),
                       try_number=try_number)
    return StreamingResponse(logs.read(store, log), media_type="text/plain; charset=utf-8")


@router.get("/seats")
def seats(request: Request, session: SessionDep, operator: UiOperatorDep) -> Response:
    """The fleet: every seat with its current execution and what its attempts are doing."""
    rows = views.fleet_page(session=session, now=utcnow())
    live = any(r.execution.observation is None or not r.execution.observation.terminal for r in rows)
    return page(request, "seats.html", operator=operator, refresh=live, rows=rows,
                stale_after=request.app.state.settings.agent_lost_after_seconds)


@router.get("/pools")
def pools(request: Request, session: SessionDep, operator: UiOperatorDep) -> Response:
    """The pools and the slots their task instances hold."""
    uses = views.pools_page(session=session)
    return page(request, "pools.html", operator=operator, refresh=any(u.occupied or u.scheduled for u in uses),
                pools=uses)


@router.get("/seats/{seat}")
def seat(request: Request, seat: str, session: SessionDep, operator: UiOperatorDep) -> Response:
    executions = views.seat_page(session=session, seat=seat)
    latest = executions[0]
    live = latest.observation is None or not latest.observation.terminal
    return page(request, "seat.html", operator=operator, refresh=live, seat=seat, executions=executions)


# --- actions: the operator rails as forms (app/ui/actions.py) -------------------------------

def _action_page(request: Request, action: str, *, back: str, back_label: str, status_code: int = 200,
                 **context: Any) -> Response:
    return page(request, "action.html", status_code=status_code, title=actions.TITLES[action], here=request.url.path,
                back=back, back_label=back_label, csrf=access.csrf_token(request), **context)


def _run_back(run: Any) -> dict[str, str]:
    return {"back": f"/ui/runs/{_segment(run.dag_id)}/{_segment(run.run_id)}", "back_label": run.run_id}


def _ti_back(ti: Any) -> dict[str, str]:
    label = ti.task_id + (f" [{ti.map_index}]" if ti.map_index >= 0 else "")
    return {"back": f"/ui/task-instances/{ti.id}", "back_label": label}


@router.get("/act/runs/{action}/{dag_id}/{run_id:path}")
def run_action_form(request: Request, action: actions.RunAction, dag_id: str, run_id: str, session: SessionDep,
                    _: UiOperatorDep) -> Response:
    """What the action will change, and the form that does it."""
    run, tis = views.run_page(session=session, dag_id=dag_id, run_id=run_id)
    return _action_page(request, action, changes=actions.run_changes(action, tis), **_run_back(run))


@router.post("/act/runs/{action}/{dag_id}/{run_id:path}", dependencies=[Depends(access.checked_form)])
def run_action(request: Request, action: actions.RunAction, dag_id: str, run_id: str, session: SessionDep,
               _: UiOperatorDep) -> Response:
    run, tis = views.run_page(session=session, dag_id=dag_id, run_id=run_id)
    changed = {c.ti.id for c in actions.run_changes(action, tis)}
    try:
        actions.apply_run(session=session, action=action, run=run)
    except AppError as exc:
        if exc.status >= 500:
            raise
        session.rollback()
        run, tis = views.run_page(session=session, dag_id=dag_id, run_id=run_id)
        return _action_page(request, action, status_code=exc.status, error=actions.refusal(exc),
                            changes=actions.run_changes(action, tis), **_run_back(run))
    commit(session)
    run, tis = views.run_page(session=session, dag_id=dag_id, run_id=run_id)
    return _action_page(request, action, done=True, after=[ti for ti in tis if ti.id in changed], **_run_back(run))


@router.get("/act/task-instances/{ti_id}/{action}")
def ti_action_form(request: Request, ti_id: uuid.UUID, action: actions.TaskAction, session: SessionDep,
                   _: UiOperatorDep) -> Response:
    ti = runs.get_task_instance(session=session, ti_id=ti_id)
    return _action_page(request, action, changes=actions.ti_changes(action, ti), **_ti_back(ti))


@router.post("/act/task-instances/{ti_id}/{action}", dependencies=[Depends(access.checked_form)])
def ti_action(request: Request, ti_id: uuid.UUID, action: actions.TaskAction, session: SessionDep,
              _: UiOperatorDep) -> Response:
    try:
        actions.apply_ti(session=session, action=action, ti_id=ti_id)
    except AppError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        session.rollback()
        ti = runs.get_task_instance(session=session, ti_id=ti_id)
        return _action_page(request, action, status_code=exc.status, error=actions.refusal(exc),
                            changes=actions.ti_changes(action, ti), **_ti_back(ti))
    commit(session)
    ti = session.get(TaskInstance, ti_id, populate_existing=True)
    return _action_page(request, action, done=True, after=[ti], **_ti_back(ti))


@router.api_route("/{unknown:path}", methods=["GET", "HEAD", "POST"])
def unknown_page(request: Request, unknown: str) -> Response:
    """Any other /ui path: an HTML 404 for the browser, not problem+json."""
    return error_page(request, 404, "Not found", "No such page.")
