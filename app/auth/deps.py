"""Authentication dependencies: who is calling, and with which kind of token."""

import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer
from sqlmodel import Session
from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.auth import throttle, tokens
from app.auth.service import Installation, verified_attempt
from app.db.types import utcnow
from app.errors import AppError, forbidden, unauthorized
from app.web.ingress import Admission

bearer_scheme = HTTPBearer(auto_error=False, description="A token from POST /auth/token or admission.")
basic_scheme = HTTPBasic(auto_error=False, description="Operator username and password.")

BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
BasicDep = Annotated[HTTPBasicCredentials | None, Depends(basic_scheme)]
Dependency = TypeVar("Dependency", bound=Callable[..., Any])


def installation(request: Request) -> Installation:
    return request.app.state.installation


# Where a client sends back the device token of its last login (app/auth/throttle.py).
DEVICE_COOKIE, DEVICE_HEADER = "fenceline_device", "fenceline-device"


def device_of(request: Request, username: str) -> str | None:
    """The device a token the client sent recognises for `username` (cookie or header), if any."""
    keyring = installation(request).keyring
    for token in (request.headers.get(DEVICE_HEADER), request.cookies.get(DEVICE_COOKIE)):
        if token and (device := tokens.device_of(keyring, token, username)) is not None:
            return device
    return None


def check_password(request: Request, username: str, password: str, scheme: str = "Bearer",
                   refusal: str = "Invalid username or password.") -> None:
    """The one password check of every surface (POST /auth/token, HTTP Basic, the dashboard's
    login form): 429 with Retry-After while the caller is throttled (app/auth/throttle.py), 401
    for a wrong password, counted; None for the right one. The counts are written in a
    transaction of their own: the request's own is rolled back with its 401."""
    state = request.app.state
    caller = throttle.Caller(username, request.client.host if request.client else None, device_of(request, username))
    now = utcnow()
    with Session(state.read_engine) as session:
        standing = throttle.standing(session=session, caller=caller, now=now)
    if standing.wait_seconds:
        raise throttle.throttled(standing.wait_seconds)
    right = installation(request).operator.check(username, password)
    if not right or standing.own_failures:
        with Session(state.engine) as session:
            if right:
                throttle.succeeded(session=session, caller=caller)
            else:
                throttle.failed(session=session, caller=caller, now=now)
            session.commit()
    if not right:
        raise unauthorized(refusal, scheme=scheme)


def operator_token(request: Request, username: str) -> str:
    """A fresh operator token for `username`, whose password was just checked."""
    ttl = request.app.state.settings.operator_token_ttl_seconds
    return tokens.mint_operator(installation(request).keyring, username, ttl_seconds=ttl)


def remember_device(request: Request, response: Response, username: str) -> str:
    """A fresh device token for the client that just logged in as `username`, set as its cookie
    too (HttpOnly, SameSite=Strict: no other site can send it); answers the token."""
    ttl = request.app.state.settings.device_token_ttl_seconds
    token = tokens.mint_device(installation(request).keyring, username, ttl_seconds=ttl)
    response.set_cookie(DEVICE_COOKIE, token, max_age=ttl, path="/", httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return token


@dataclass(frozen=True)
class TokenNeed:
    """The bearer token scopes an authentication dependency takes, and whether it takes HTTP
    Basic instead."""

    scopes: tuple[str, ...]
    basic: bool = False


# The authentication dependencies whose credential is checked in a request's headers before its
# body is read (HeaderCheck), with what each takes.
CHECKED_BEFORE_BODY: dict[Callable[..., Any], TokenNeed] = {}


def checked_before_body(*scopes: str, basic: bool = False) -> Callable[[Dependency], Dependency]:
    """Register an authentication dependency (taking `request`, `bearer` and, with `basic`,
    `basic`) for HeaderCheck."""
    def register(dependency: Dependency) -> Dependency:
        CHECKED_BEFORE_BODY[dependency] = TokenNeed(scopes, basic)
        return dependency
    return register


def _needed(dependant: Dependant) -> tuple[Callable[..., Any], TokenNeed] | None:
    for dependency in dependant.dependencies:
        if dependency.call in CHECKED_BEFORE_BODY:
            return dependency.call, CHECKED_BEFORE_BODY[dependency.call]
        if (found := _needed(dependency)) is not None:
            return found
    return None


class HeaderCheck:
    """The ingress's gate (app/web/ingress.py): what a request's headers earn its body before any
    of it is read. A route whose authentication dependency needs a bearer token refuses a missing
    or invalid one as that dependency itself refuses it; a valid one is `verified`. HTTP Basic,
    on a route that takes it, is checked by the route (throttled, app/auth/throttle.py): its body
    is held to the unverified limit meanwhile, as a login's is. Pure CPU, like verified_claims."""

    def __init__(self, state: Any, routes: list[BaseRoute]) -> None:
        self.state = state
        # Every route as routing tries them (included routers' with their routers' dependencies).
        self.routes = [(route, _needed(dependant) if (dependant := getattr(route, "dependant", None)) else None)
                       for route in iter_route_contexts(routes)]

    def _route_needs(self, scope: Scope) -> tuple[Callable[..., Any], TokenNeed] | None:
        for route, found in self.routes:
            if route.matches(scope)[0] is Match.FULL:
                return found
        return None

    async def __call__(self, scope: Scope) -> Admission:
        installation = getattr(self.state, "installation", None)
        found = self._route_needs(scope)
        if found is None or installation is None:  # a route that takes no token, or not started
            return Admission()
        dependency, need = found
        kind, _, credentials = Headers(scope=scope).get("authorization", "").partition(" ")
        if kind.lower() == "basic" and need.basic:
            return Admission()
        bearer = HTTPAuthorizationCredentials(scheme=kind, credentials=credentials.strip()) \
            if kind.lower() == "bearer" else None
        if bearer is not None:
            try:
                tokens.decode(installation.keyring, bearer.credentials, scopes=need.scopes)
                return Admission(verified=True)
            except (tokens.InvalidToken, tokens.WrongScope):
                pass
        try:  # the route's own refusal, in its words
            refused = dependency(Request(scope), bearer, None) if need.basic else dependency(Request(scope), bearer)
            if inspect.isawaitable(refused):
                await refused
        except AppError as refusal:
            return Admission(refusal=refusal)
        return Admission(refusal=unauthorized("The token was refused."))


def verified_claims(request: Request, bearer: HTTPAuthorizationCredentials | None, *scopes: str) -> dict[str, Any]:
    """The claims of the bearer token, which must have one of `scopes`; else 401/403. Pure CPU
    (the key ring is read once, at start), so the dependencies built on it are `async`: they
    run on the event loop instead of costing a thread hop per request."""
    if bearer is None:
        raise unauthorized("A bearer token is required.")
    try:
        return tokens.decode(installation(request).keyring, bearer.credentials, scopes=scopes)
    except tokens.InvalidToken as exc:
        raise unauthorized(f"The token was refused: {exc}.") from exc
    except tokens.WrongScope as exc:
        raise forbidden(str(exc)) from exc


@checked_before_body(tokens.OPERATOR_SCOPE)
async def require_operator(request: Request, bearer: BearerDep) -> str:
    """An operator's bearer token; answers the operator's name."""
    return verified_claims(request, bearer, tokens.OPERATOR_SCOPE)["sub"]


@checked_before_body(tokens.LAUNCHER_SCOPE, tokens.OPERATOR_SCOPE)
async def require_launcher(request: Request, bearer: BearerDep) -> str:
    """A launcher token (admission and execution updates only) or an operator's token."""
    return verified_claims(request, bearer, tokens.LAUNCHER_SCOPE, tokens.OPERATOR_SCOPE)["sub"]


@checked_before_body(tokens.OPERATOR_SCOPE, basic=True)
def require_operator_or_basic(request: Request, bearer: BearerDep, basic: BasicDep) -> str:
    """An operator by bearer token or HTTP Basic (Airflow 2 clients, metric scrapers)."""
    if basic is not None and bearer is None:
        check_password(request, basic.username, basic.password, scheme='Basic realm="fenceline"')
        return basic.username
    return verified_claims(request, bearer, tokens.OPERATOR_SCOPE)["sub"]


@checked_before_body(tokens.METRICS_SCOPE, tokens.OPERATOR_SCOPE, basic=True)
def require_metrics_reader(request: Request, bearer: BearerDep, basic: BasicDep) -> str:
    """A metrics token, an operator's bearer token or the operator's HTTP Basic (/metrics)."""
    if basic is not None and bearer is None:
        return require_operator_or_basic(request, bearer, basic)
    return verified_claims(request, bearer, tokens.METRICS_SCOPE, tokens.OPERATOR_SCOPE)["sub"]


@checked_before_body(tokens.WORKER_SCOPE)
async def require_worker(request: Request, bearer: BearerDep) -> uuid.UUID:
    """A worker token from admission; answers its execution_id."""
    claims = verified_claims(request, bearer, tokens.WORKER_SCOPE)
    try:
        execution_id = uuid.UUID(claims["sub"])
    except ValueError as exc:
        raise unauthorized("The worker token names no execution.") from exc
    request.state.log_identity = {"execution_id": execution_id}  # for the request's log line (app/telemetry/observe.py)
    return execution_id


@checked_before_body(tokens.ATTEMPT_SCOPE)
async def require_attempt(request: Request, bearer: BearerDep) -> tokens.AttemptClaims:
    """An attempt token (contract 3), checked by verified_attempt."""
    if bearer is None:
        raise unauthorized("A bearer token is required.")
    attempt, execution_id = verified_attempt(installation(request).keyring, bearer.credentials,
                                             accept_legacy=request.app.state.settings.accept_legacy_attempt_tokens)
    request.state.log_identity = {"ti_id": attempt.ti_id, "try_number": attempt.try_number,
                                  "attempt_epoch": attempt.attempt_epoch, "execution_id": execution_id}
    return attempt


async def require_operator_or_attempt(request: Request, bearer: BearerDep) -> tokens.AttemptClaims | None:
    """An operator's token (None) or an attempt token (its claims, checked as require_attempt
    checks them): reads an attempt's own task instance may answer either."""
    if verified_claims(request, bearer, tokens.OPERATOR_SCOPE, tokens.ATTEMPT_SCOPE)["scope"] == tokens.OPERATOR_SCOPE:
        return None
    return await require_attempt(request, bearer)


OperatorDep = Annotated[str, Depends(require_operator)]
LauncherDep = Annotated[str, Depends(require_launcher)]
OperatorOrBasicDep = Annotated[str, Depends(require_operator_or_basic)]
MetricsReaderDep = Annotated[str, Depends(require_metrics_reader)]
WorkerDep = Annotated[uuid.UUID, Depends(require_worker)]
AttemptDep = Annotated[tokens.AttemptClaims, Depends(require_attempt)]
OperatorOrAttemptDep = Annotated[tokens.AttemptClaims | None, Depends(require_operator_or_attempt)]
