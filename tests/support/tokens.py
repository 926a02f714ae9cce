"""Attempt tokens minted as the server mints them (contract 3), and read as it verifies them."""

import time
from typing import Any

import jwt

from app.auth.tokens import KeyRing, mint
from tests.support.settings import JWT_SECRET

KEYS = KeyRing("k1", {"k1": JWT_SECRET})
EPOCH_ABSENT = object()


def attempt_token(ti: dict[str, Any], execution_id: str, epoch: Any = EPOCH_ABSENT, *, keyring: KeyRing = KEYS,
                  orig_iat: int | None = None, ttl: int = 600, now: int | None = None,
                  **claims: Any) -> str:
    """An attempt token for `ti`, minted as the server would; without attempt_epoch by default."""
    body = {"sub": ti["ti_id"], "scope": "attempt", "dag_id": ti["dag_id"], "run_id": ti["run_id"],
            "task_id": ti["task_id"], "map_index": ti["map_index"], "try_number": ti["try_number"],
            "execution_id": execution_id, "orig_iat": orig_iat or int(time.time()), **claims}
    if epoch is not EPOCH_ABSENT:
        body["attempt_epoch"] = epoch
    return mint(keyring, body, ttl_seconds=ttl, now=now)


def decoded(token: str, secret: str = JWT_SECRET) -> dict[str, Any]:
    """The claims of an attempt token, verified as the server verifies them."""
    return jwt.decode(token, secret, algorithms=["HS256"], issuer="fenceline", audience="fenceline:attempt")
