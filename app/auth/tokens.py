"""JWT minting and verification: the only module that imports jwt.

Tokens are HS256 with a `kid` header naming the key; several keys may be accepted at once so
that the signing key can rotate. Verification pins the algorithm (no `alg: none`, no algorithm
confusion), requires the standard claims and checks the scope.
"""

import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt

ALGORITHM = "HS256"
REQUIRED_CLAIMS = ["sub", "scope", "iat", "exp", "jti"]


class InvalidToken(Exception):
    """Bad signature, unknown key, expired, malformed: the caller is not authenticated."""


class WrongScope(Exception):
    """A valid token of another kind: authenticated, not allowed."""


@dataclass(frozen=True)
class KeyRing:
    active_kid: str
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def active_key(self) -> str:
        return self.keys[self.active_kid]


def new_secret() -> str:
    return secrets.token_urlsafe(48)


def mint(keyring: KeyRing, claims: dict[str, Any], *, ttl_seconds: int, now: int | None = None) -> str:
    """Sign `claims` with the active key; adds iat, exp and jti unless given."""
    issued = int(time.time()) if now is None else now
    body = {"iat": issued, "exp": issued + ttl_seconds, "jti": uuid.uuid4().hex, **claims}
    return jwt.encode(body, keyring.active_key, algorithm=ALGORITHM, headers={"kid": keyring.active_kid})


def decode(keyring: KeyRing, token: str, *, scopes: tuple[str, ...]) -> dict[str, Any]:
    """The verified claims of `token`, whose scope must be one of `scopes`."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidToken("malformed token") from exc
    kid = header.get("kid")
    if header.get("alg") != ALGORITHM or not isinstance(kid, str) or kid not in keyring.keys:
        raise InvalidToken("unknown key or algorithm")
    try:
        claims = jwt.decode(
            token, keyring.keys[kid], algorithms=[ALGORITHM], options={"require": REQUIRED_CLAIMS}
        )
    except jwt.ExpiredSignatureError as exc:
        raise InvalidToken("token expired") from exc
    except jwt.PyJWTError as exc:
        raise InvalidToken("invalid token") from exc
    if claims.get("scope") not in scopes:
        raise WrongScope(f"a {claims.get('scope')!r} token cannot call this endpoint")
    return claims
