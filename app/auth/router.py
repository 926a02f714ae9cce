"""Operator login: POST /auth/token, as Airflow 3 clients call it."""

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from app.auth import tokens
from app.auth.deps import installation, unauthorized
from app.errors import problems

router = APIRouter(tags=["auth"])


class LoginRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    username: str
    password: str


class TokenPublic(BaseModel):
    access_token: str
    token_type: str = "bearer"


def operator_token(request: Request, username: str) -> str:
    inst = installation(request)
    ttl = request.app.state.settings.operator_token_ttl_seconds
    return tokens.mint(inst.keyring, {"sub": username, "scope": "operator"}, ttl_seconds=ttl)


@router.post("/auth/token", status_code=201, responses=problems(401, 422))
def login(body: LoginRequest, request: Request) -> TokenPublic:
    """Exchange the operator's username and password for a bearer token."""
    if not installation(request).operator.check(body.username, body.password):
        raise unauthorized("Invalid username or password.")
    return TokenPublic(access_token=operator_token(request, body.username))
