"""problem+json on the wire: the Problem schema, the route declarations, the error responses
of the OpenAPI document, and the global handlers that render AppError, validation errors and
database faults (RFC 9457)."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.db.faults import DatabaseFault, database_fault
from app.errors import AppError, invalid_input, unstorable_value
from app.telemetry.metrics import stale_reports
from app.telemetry.observe import route_of
from app.web.schemas import InvalidRequest, Problem

log = logging.getLogger("fenceline")

PROBLEM_JSON = "application/problem+json"


def schema_ref(model: type[BaseModel]) -> dict[str, str]:
    """A reference to `model`'s schema among the document's components, where it is then
    added (for models FastAPI does not document by itself: problems, a body a route parses)."""
    _documented_models[model.__name__] = model
    return {"$ref": f"#/components/schemas/{model.__name__}"}


# Every such model, by name (their schemas join the document's components).
_documented_models: dict[str, type[BaseModel]] = {m.__name__: m for m in (Problem, InvalidRequest)}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` declaration of a route's refusals, so the OpenAPI document tells the
    truth: a Problem (an InvalidRequest for a 422), under the media type it is sent with."""
    return {s: {"description": HTTPStatus(s).phrase,
                "content": {PROBLEM_JSON: {"schema": schema_ref(InvalidRequest if s == 422 else Problem)}}}
            for s in statuses}


def refusals(*families: type[Problem]) -> dict[int | str, dict[str, Any]]:
    """The `responses=` declaration of refusals whose members a client must read typed (a
    worker branches on a stale report's `should_terminate`): each family under the statuses it
    is sent with; where several share a status, one of them, told apart by its pinned `type`."""
    declared: dict[int | str, dict[str, Any]] = {}
    for status in sorted({s for family in families for s in family.STATUSES}):
        members = [schema_ref(f) for f in families if status in f.STATUSES]
        schema = members[0] if len(members) == 1 else {"oneOf": members}
        declared[status] = {"description": HTTPStatus(status).phrase, "content": {PROBLEM_JSON: {"schema": schema}}}
    return declared


def _problem_schemas() -> dict[str, Any]:
    """The JSON schemas of every model referred to by schema_ref, their own references pointing
    into the document's components."""
    _, found = models_json_schema([(m, "serialization") for m in _documented_models.values()],
                                  ref_template="#/components/schemas/{model}")
    return found["$defs"]


def document_errors(app: FastAPI) -> None:
    """Complete the document's error responses: every status a route may answer whatever it
    declares (a body past its limit, a NUL in the URL, a database fault), each in its family's
    shape (app/airflow registers theirs), and none it never answers."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.update(_problem_schemas())
            _fit_for_generators(components)
            for family in {id(f): f for f in (NATIVE, *_families.values())}.values():
                components.update(family.schemas)
            for path, operations in schema["paths"].items():
                family = family_of(path)
                for method, operation in operations.items():
                    _complete(operation.setdefault("responses", {}), family, method)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _complete(responses: dict[str, Any], family: "ErrorFamily", method: str) -> None:
    for status in family.never:
        responses.pop(str(status), None)
    for status in (*family.answers, *(() if method in ("get", "head") else WRITE_FAULTS)):
        if "content" not in responses.get(str(status), {}):  # a route's own (typed) declaration stands
            responses[str(status)] = family.documented(status)
    for status, response in responses.items():  # declared by description alone: give it its shape
        if status[0] in "45" and "content" not in response:
            response.update(family.documented(int(status)))


def _fit_for_generators(components: dict[str, Any]) -> None:
    """Free-form objects FastAPI documents without saying what they hold, said (SDK generators
    otherwise warn and fall back to an untyped value): a validation error's `ctx`."""
    for name in ("ValidationError",):
        ctx = components.get(name, {}).get("properties", {}).get("ctx")
        if ctx is not None and ctx.get("type") == "object":
            ctx.setdefault("additionalProperties", True)


def problem_response(
    status: int, type: str, title: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {"type": type, "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(jsonable_encoder(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


@dataclass(frozen=True)
class ErrorFamily:
    """How a family of routes refuses: `render(status=, type=, title=, detail=, headers=, **extra)`
    sends a refusal, `documented(status)` is the OpenAPI response that describes it (its
    `schemas` go to the document's components), `answers` are the statuses every route of the
    family may send, and `never` those FastAPI documents that the family never sends."""

    render: Callable[..., JSONResponse]
    documented: Callable[[int], dict[str, Any]]
    answers: tuple[int, ...]
    never: tuple[int, ...] = ()
    schemas: dict[str, Any] = field(default_factory=dict)


# A body past its limit, a NUL in the URL, a database that is busy or unreachable; and, for a
# write, a full database.
NATIVE = ErrorFamily(render=lambda **problem: problem_response(**problem), documented=lambda s: problems(s)[s],
                     answers=(413, 422, 503))
WRITE_FAULTS = (507,)

# Airflow-compatible routers register their family for their prefix, so that their errors take
# their Airflow version's shape while every native route answers problem+json.
_families: dict[str, ErrorFamily] = {}


def register_error_family(prefix: str, family: ErrorFamily) -> None:
    _families[prefix] = family


def family_of(path: str) -> ErrorFamily:
    return next((f for prefix, f in _families.items() if path.startswith(prefix)), NATIVE)


def render(request: Request, status: int, type: str, title: str, detail: str,
           headers: dict[str, str] | None = None, **extra: Any) -> JSONResponse:
    return family_of(request.url.path).render(status=status, type=type, title=title, detail=detail,
                                              headers=headers, **extra)


def validation_problem(request: Request, errors: list[dict[str, Any]], detail: str | None = None) -> JSONResponse:
    """422 validation-error listing `errors` ({loc, msg, type} each); the detail names where."""
    return render_error(request, invalid_input(errors, detail))


def render_error(request: Request, exc: AppError) -> JSONResponse:
    return render(request, exc.status, exc.type, exc.title, exc.detail, headers=exc.headers or None, **exc.extra)


_STATUS_TYPES = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Unauthorized"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("payload-too-large", "Payload too large"),
    415: ("unsupported-media-type", "Unsupported media type"),
}


class RefuseNulInUrl:
    """A NUL character in the path or query is refused before routing (422 `invalid-value`):
    PostgreSQL cannot store or compare it, and both databases must answer alike."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if scope["type"] == "http" and ("\x00" in scope["path"] or b"%00" in query or b"\x00" in query):
            response = render(Request(scope), 422, "invalid-value", "Invalid value",
                              "The path or query contains a NUL character.")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _served_methods(request: Request) -> set[str]:
    """Every method some route serves at the request's path (asked of the router itself:
    included routers keep their routes to themselves)."""
    return {method for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
            if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                   for route in request.app.router.routes)}


def install_error_handlers(app: FastAPI) -> None:
    app.add_middleware(RefuseNulInUrl)

    @app.exception_handler(AppError)
    async def _app_error(request: Request, exc: AppError) -> JSONResponse:
        if exc.type == "stale-report":
            stale_reports.labels(route_of(request.scope)).inc()
        return render_error(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        type, title = _STATUS_TYPES.get(exc.status_code, ("http-error", "HTTP error"))
        detail = exc.detail if isinstance(exc.detail, str) else title
        headers = getattr(exc, "headers", None)
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"No route {request.method} {request.url.path}"
        if exc.status_code == 405:  # Starlette names the methods of the first route that matched
            headers = {**(headers or {}), "Allow": ", ".join(sorted(_served_methods(request)))}
        return render(request, exc.status_code, type, title, detail, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()
        ]
        return validation_problem(request, errors)

    @app.exception_handler(IntegrityError)
    async def _integrity_error(request: Request, exc: IntegrityError) -> JSONResponse:
        log.info("integrity conflict on %s: %s", request.url.path, exc.orig)
        return render(request, 409, "conflict", "Conflict", "The write conflicts with stored state.")

    async def _unstorable(request: Request, exc: Exception) -> JSONResponse:
        # A value no column can hold (a NUL character or a lone surrogate in text, an integer
        # beyond 64 bits): the client's input, so a 422, and the request rolled back.
        log.info("unstorable value on %s: %r", request.url.path, exc)
        return render_error(request, unstorable_value())

    for unstorable in (DataError, UnicodeEncodeError, OverflowError):
        app.add_exception_handler(unstorable, _unstorable)

    @app.exception_handler(StatementError)
    async def _statement_error(request: Request, exc: StatementError) -> JSONResponse:
        # SQLAlchemy wraps what the driver raised while binding parameters.
        if isinstance(exc.orig, (UnicodeEncodeError, OverflowError)):
            return await _unstorable(request, exc)
        return await _internal_error(request, exc)

    @app.exception_handler(PoolTimeoutError)
    @app.exception_handler(OperationalError)
    async def _database_fault(request: Request, exc: Exception) -> JSONResponse:
        fault = database_fault(exc)
        if fault is None:  # a missing table, an unmigrated schema: a bug to see, not a retry
            return await _internal_error(request, exc)
        log.warning("database %s on %s: %s", fault.name, request.url.path, getattr(exc, "orig", exc))
        if fault is DatabaseFault.FULL:
            return render(request, 507, "database-full", "Database full", fault.detail)
        if fault is DatabaseFault.CONFLICT:
            return render(request, 503, "database-conflict", "Concurrent writes conflicted", fault.detail,
                          headers={"Retry-After": "1"})
        return render(request, 503, "database-unavailable", "Database unavailable", fault.detail,
                      headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return render(request, 500, "internal-error", "Internal server error", "An unexpected error occurred.")
