"""Authentication dependencies: who is calling, and with which kind of token."""

import uuid
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer
from sqlmodel import Session

from app.auth import throttle, tokens
from app.auth.service import Installation, verified_attempt
from app.db.types import utcnow
from app.errors import forbidden, unauthorized

bearer_scheme = HTTPBearer(auto_error=False, description="A token from POST /auth/token or admission.")
basic_scheme = HTTPBasic(auto_error=False, description="Operator username and password.")

BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]
BasicDep = Annotated[HTTPBasicCredentials | None, Depends(basic_scheme)]


def installation(request: Request) -> Installation:
    return request.app.state.installation


def check_password(request: Request, username: str, password: str, scheme: str = "Bearer",
                   refusal: str = "Invalid username or password.") -> None:
    """The one password check of every surface (POST /auth/token, HTTP Basic, the dashboard's
    login form): 429 with Retry-After while the caller is throttled (app/auth/throttle.py), 401
    for a wrong password, counted; None for the right one. The counts are written in a
    transaction of their own: the request's own is rolled back with its 401."""
    state = request.app.state
    caller = throttle.Caller(username, request.client.host if request.client else None)
    now = utcnow()
    with Session(state.read_engine) as session:
        standing = throttle.standing(session=session, caller=caller, now=now)
    if standing.wait_seconds:
        raise throttle.throttled(standing.wait_seconds)
    right = installation(request).operator.check(username, password)
    if not right or standing.username_failures:
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


def bearer_allows(state: Any, headers: list[tuple[bytes, bytes]], scopes: tuple[str, ...]) -> bool:
    """Whether `headers` (a request's, as the ASGI scope holds them) carry a valid bearer token of
    one of `scopes` for the installation in `state` (the application's): what the ingress asks
    before it lets a route's large body in (app/web/ingress.py). Pure CPU, like verified_claims;
    the route's own dependency still decides what the caller may do."""
    installation = getattr(state, "installation", None)
    if installation is None:  # not started
        return False
    for name, value in headers:
        if name == b"authorization":
            kind, _, credentials = value.decode("latin-1").partition(" ")
            if kind.lower() != "bearer":
                return False
            try:
                tokens.decode(installation.keyring, credentials.strip(), scopes=scopes)
            except (tokens.InvalidToken, tokens.WrongScope):
                return False
            return True
    return False


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


async def require_operator(request: Request, bearer: BearerDep) -> str:
    """An operator's bearer token; answers the operator's name."""
    return verified_claims(request, bearer, tokens.OPERATOR_SCOPE)["sub"]


async def require_launcher(request: Request, bearer: BearerDep) -> str:
    """A launcher token (admission and execution updates only) or an operator's token."""
    return verified_claims(request, bearer, tokens.LAUNCHER_SCOPE, tokens.OPERATOR_SCOPE)["sub"]


def require_operator_or_basic(request: Request, bearer: BearerDep, basic: BasicDep) -> str:
    """An operator by bearer token or HTTP Basic (Airflow 2 clients, metric scrapers)."""
    if basic is not None and bearer is None:
        check_password(request, basic.username, basic.password, scheme='Basic realm="fenceline"')
        return basic.username
    return verified_claims(request, bearer, tokens.OPERATOR_SCOPE)["sub"]


def require_metrics_reader(request: Request, bearer: BearerDep, basic: BasicDep) -> str:
    """A metrics token, an operator's bearer token or the operator's HTTP Basic (/metrics)."""
    if basic is not None and bearer is None:
        return require_operator_or_basic(request, bearer, basic)
    return verified_claims(request, bearer, tokens.METRICS_SCOPE, tokens.OPERATOR_SCOPE)["sub"]


async def require_worker(request: Request, bearer: BearerDep) -> uuid.UUID:
    """A worker token from admission; answers its execution_id."""
    claims = verified_claims(request, bearer, tokens.WORKER_SCOPE)
    try:
        execution_id = uuid.UUID(claims["sub"])
    except ValueError as exc:
        raise unauthorized("The worker token names no execution.") from exc
    request.state.log_identity = {"execution_id": execution_id}  # for the request's log line (app/telemetry/observe.py)
    return execution_id


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
