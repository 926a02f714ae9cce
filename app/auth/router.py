"""Operator login: POST /auth/token, as Airflow 3 clients call it."""

from typing import Annotated
from urllib.parse import parse_qs

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.auth import tokens
from app.auth.deps import OperatorDep, check_password, installation, operator_token, remember_device
from app.errors import AppError
from app.web.problems import problems, schema_ref
from app.web.routes import Router
from app.web.schemas import Strict

router = Router(tags=["auth"])


class LoginRequest(Strict):
    username: str
    password: str


class TokenPublic(BaseModel):
    access_token: str
    token_type: str = "bearer"
    # Sent back with later logins (the Fenceline-Device header, or the cookie of the same name
    # set with this answer), it keeps others' failed logins from slowing this client down.
    device_token: str


FORM = "application/x-www-form-urlencoded"


async def login_body(request: Request) -> LoginRequest:
    """The credentials as JSON or as an OAuth2 password-flow form (Airflow 3 accepts both)."""
    if request.headers.get("content-type", "").split(";")[0].strip() == FORM:
        fields = {k: v[-1] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()}
        fields = {k: fields[k] for k in ("username", "password") if k in fields}
    else:
        try:
            fields = await request.json()
        except ValueError:
            raise AppError(422, "validation-error", "Invalid request", "The body is not JSON.") from None
    try:
        return LoginRequest.model_validate(fields)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


# The document declares the JSON body only: generators mishandle one operation with two body
# types, and the form is the same two fields.
@router.post("/auth/token", status_code=201, responses=problems(401, 422, 429), openapi_extra={"requestBody": {
    "required": True, "content": {"application/json": {"schema": schema_ref(LoginRequest)}}}})
def login(request: Request, response: Response, body: Annotated[LoginRequest, Depends(login_body)]) -> TokenPublic:
    """Exchange the operator's username and password for a bearer token. The same fields are
    also accepted as an `application/x-www-form-urlencoded` (OAuth2 password flow) form.
    Failures slow further attempts down: 429 with Retry-After, except for a client that sends
    the device token of an earlier login (`Fenceline-Device` header or `fenceline_device`
    cookie), whose own failures alone slow it down."""
    check_password(request, body.username, body.password)
    return TokenPublic(access_token=operator_token(request, body.username),
                       device_token=remember_device(request, response, body.username))


class LauncherTokenPublic(BaseModel):
    launcher_token: str
    expires_in: int


@router.post("/v1/auth/launcher-tokens", status_code=201, responses=problems(401, 403))
def mint_launcher_token(request: Request, operator: OperatorDep) -> LauncherTokenPublic:
    """A token for workers and launchers: it admits executions and updates them (PATCH,
    reads of executions), and can do nothing else an operator can."""
    ttl = request.app.state.settings.launcher_token_ttl_seconds
    token = tokens.mint_launcher(installation(request).keyring, operator, ttl_seconds=ttl)
    return LauncherTokenPublic(launcher_token=token, expires_in=ttl)


class JsonWebKeySet(BaseModel):
    """RFC 7517: the public keys tokens are signed with, each with its `kid`, `alg` and `use`."""

    keys: list[dict[str, str]]


@router.get("/.well-known/jwks.json")
def jwks(request: Request, response: Response) -> JsonWebKeySet:
    """Every public key a token of this installation may be signed with, the active one and
    those still accepted during a rotation (contract 11.3), so another service verifies a
    token with a stock JWT library and no secret of fenceline's. Open, as the health routes
    are. Empty while tokens are signed HS256 (the default), whose key is a shared secret."""
    response.headers["Cache-Control"] = "public, max-age=300"
    return JsonWebKeySet(keys=installation(request).keyring.jwks())


class MetricsTokenPublic(BaseModel):
    metrics_token: str
    expires_in: int


@router.post("/v1/auth/metrics-tokens", status_code=201, responses=problems(401, 403))
def mint_metrics_token(request: Request, operator: OperatorDep) -> MetricsTokenPublic:
    """A token for a Prometheus scraper: it reads /metrics and can do nothing else."""
    ttl = request.app.state.settings.metrics_token_ttl_seconds
    token = tokens.mint_metrics(installation(request).keyring, operator, ttl_seconds=ttl)
    return MetricsTokenPublic(metrics_token=token, expires_in=ttl)
