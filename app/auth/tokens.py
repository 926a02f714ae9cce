"""Every token kind, minted, renewed and verified here (contract 3): the only module that
imports jwt, and the only one that decides what a token claims.

Kinds, by `scope`: operator (an operator's login), launcher (admits and updates executions),
metrics (reads /metrics, nothing else), worker (one execution claims work), attempt (one
attempt's agent writes) and log-cursor (a position in one try's log). Tokens carry a `kid`
header naming the key; several keys may be accepted at once so that the signing key can rotate.
A key is an HS256 secret (the zero-set-up default) or an asymmetric key (Ed25519 as EdDSA,
ECDSA P-256 as ES256, app/auth/keys.py) whose public half anyone may verify with (jwks). Every
token names its issuer and its kind's own audience (`iss`, `aud`). Verification pins the
algorithm to the key's own (no `alg: none`, no algorithm confusion), requires the standard
claims, the issuer, an audience that matches the scope and `nbf` (with a small leeway for
clocks), and
checks the scope. A token minted before tokens named their audience is accepted for the key
ring's grace period from its `iat`, and counted; after it, it is refused like any invalid token.
"""

import secrets
import sys
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import jwt

from app.auth.attempt_key import AttemptIdentity, AttemptKey
from app.auth.keys import Key, algorithm_of, public_jwk, verifying
from app.telemetry.metrics import tokens_without_audience, zeroed

ISSUER = "fenceline"
LEEWAY_SECONDS = 30  # clock skew between replicas and agents, for exp, nbf and iat
OPERATOR_SCOPE, LAUNCHER_SCOPE, WORKER_SCOPE, METRICS_SCOPE = "operator", "launcher", "worker", "metrics"
ATTEMPT_SCOPE, CURSOR_SCOPE, DEVICE_SCOPE = "attempt", "log-cursor", "device"
zeroed(tokens_without_audience, kind=(OPERATOR_SCOPE, LAUNCHER_SCOPE, WORKER_SCOPE, METRICS_SCOPE, ATTEMPT_SCOPE,
                                      CURSOR_SCOPE))
REQUIRED_CLAIMS = ["sub", "scope", "iat", "exp", "jti"]
SCOPED_CLAIMS = [*REQUIRED_CLAIMS, "iss", "aud", "nbf"]
UNSCOPED_GRACE_SECONDS = 7 * 24 * 3600


def audience(scope: str) -> str:
    """The audience of one token kind: a token of one kind is never taken for another."""
    return f"fenceline:{scope}"


AUDIENCES = [audience(s) for s in (OPERATOR_SCOPE, LAUNCHER_SCOPE, METRICS_SCOPE, WORKER_SCOPE, ATTEMPT_SCOPE,
                                   CURSOR_SCOPE, DEVICE_SCOPE)]


class InvalidToken(Exception):
    """Bad signature, unknown key, expired, malformed: the caller is not authenticated."""


class ExpiredToken(InvalidToken):
    """A token that was valid and has expired."""


class WrongScope(Exception):
    """A valid token of another kind: authenticated, not allowed."""


class Verified:
    """Tokens this key ring verified, with the claims they carry, checked against the times
    those claims hold (nbf/iat and exp, with the leeway) on every use: an agent presents one
    attempt token on every write of its attempt, and checking its signature each time would be
    a large share of a heartbeat's CPU. Only a token that passed every check is kept, under its
    exact text, so a hit is as good as a check.

    Bounded: the oldest entries go first, in constant time (an OrderedDict, since a plain dict
    finds its first key by skipping the slots its deletions left). The bound holds a large
    fleet's tokens: with fewer entries than attempts heartbeating in turn, every use would miss.
    An entry is about 2 KB (its keys interned, shared across entries), the claims alone: a dict
    of strings and numbers, which the garbage collector does not track (a tuple around it would
    be tracked, and walked by every full collection; docs/performance.md)."""

    MAX_ENTRIES = 65536

    def __init__(self) -> None:
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str, now: float) -> dict[str, Any] | None:
        claims = self._entries.get(token)
        if claims is None:
            return None
        not_before = max(int(claims["iat"]), int(claims["nbf"])) - LEEWAY_SECONDS
        expires = int(claims["exp"]) + LEEWAY_SECONDS
        return claims if not_before <= now < expires else None  # else the full check says why

    def keep(self, token: str, claims: dict[str, Any]) -> None:
        claims = {sys.intern(name): value for name, value in claims.items()}
        with self._lock:
            if len(self._entries) >= self.MAX_ENTRIES:
                self._entries.popitem(last=False)
            self._entries[token] = claims


@dataclass(frozen=True)
class KeyRing:
    """The keys this installation signs and verifies with, and how long a token minted before
    tokens named their audience is still accepted (counted from its iat)."""

    active_kid: str
    keys: dict[str, Key] = field(default_factory=dict)
    unscoped_grace_seconds: int = UNSCOPED_GRACE_SECONDS
    verified: Verified = field(default_factory=Verified, compare=False, repr=False)

    @property
    def active_key(self) -> Key:
        return self.keys[self.active_kid]

    def jwks(self) -> list[dict[str, str]]:
        """The public keys of the ring's asymmetric keys, as JWKs with their kid (RFC 7517)."""
        return [public_jwk(key, kid) for kid, key in self.keys.items() if not isinstance(key, str)]


def new_secret() -> str:
    return secrets.token_urlsafe(48)


def mint(keyring: KeyRing, claims: dict[str, Any], *, ttl_seconds: int, now: int | None = None) -> str:
    """Sign `claims` (which name their `scope`) with the active key; adds iat, nbf, exp, jti,
    the issuer and the scope's audience unless given. The signer under every kind below: the
    rest of the application mints through those."""
    issued = int(time.time()) if now is None else now
    body = {"iat": issued, "nbf": issued, "exp": issued + ttl_seconds, "jti": uuid.uuid4().hex, "iss": ISSUER,
            "aud": audience(claims["scope"]), **claims}
    return _sign(keyring, body)


def _sign(keyring: KeyRing, body: dict[str, Any]) -> str:
    key = keyring.active_key
    return jwt.encode(body, key, algorithm=algorithm_of(key), headers={"kid": keyring.active_kid})


def decode(keyring: KeyRing, token: str, *, scopes: tuple[str, ...]) -> dict[str, Any]:
    """The verified claims of `token`, whose scope must be one of `scopes`."""
    claims = keyring.verified.get(token, time.time())
    if claims is None:
        claims = _verify(keyring, token)
    scope = claims.get("scope")
    if scope not in scopes:
        raise WrongScope(f"a {scope!r} token cannot call this endpoint")
    if "aud" in claims and claims["aud"] != audience(scope):
        raise InvalidToken("the token's audience is not its kind's")
    return claims


def _verify(keyring: KeyRing, token: str) -> dict[str, Any]:
    """The claims of `token` once its key, signature, standard claims and issuer are checked
    (kept in the key ring's Verified when its audience is its kind's); InvalidToken otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as exc:
        raise InvalidToken("malformed token") from exc
    kid = header.get("kid")
    if not isinstance(kid, str) or kid not in keyring.keys:
        raise InvalidToken("unknown key or algorithm")
    algorithm = algorithm_of(keyring.keys[kid])
    if header.get("alg") != algorithm:  # the key's own algorithm, whatever the header asks
        raise InvalidToken("unknown key or algorithm")
    key = verifying(keyring.keys[kid])
    try:
        try:
            claims = jwt.decode(token, key, algorithms=[algorithm], issuer=ISSUER, audience=AUDIENCES,
                                leeway=LEEWAY_SECONDS, options={"require": SCOPED_CLAIMS})
        except jwt.MissingRequiredClaimError as exc:
            if exc.claim not in ("iss", "aud", "nbf"):
                raise
            claims = _unscoped(keyring, token, key)
    except jwt.ExpiredSignatureError as exc:
        raise ExpiredToken("token expired") from exc
    except jwt.PyJWTError as exc:
        raise InvalidToken("invalid token") from exc
    if "aud" in claims and claims["aud"] == audience(claims.get("scope")):
        keyring.verified.keep(token, claims)  # not a token from before audiences: counted on every use
    return claims


def _unscoped(keyring: KeyRing, token: str, key: Key) -> dict[str, Any]:
    """The claims of a token minted before tokens named their issuer and audience: accepted,
    and counted, within the grace period from its iat; InvalidToken after it."""
    claims = jwt.decode(token, key, algorithms=[algorithm_of(key)], leeway=LEEWAY_SECONDS,
                        options={"require": REQUIRED_CLAIMS, "verify_aud": False})
    if "iss" in claims or "aud" in claims:
        raise InvalidToken("the token names an issuer or an audience, not both")
    if not isinstance(claims["iat"], int) or claims["iat"] + keyring.unscoped_grace_seconds <= time.time():
        raise InvalidToken("a token without issuer and audience is no longer accepted")
    tokens_without_audience.labels(kind=str(claims.get("scope"))).inc()
    return claims


def mint_operator(keyring: KeyRing, username: str, *, ttl_seconds: int) -> str:
    """An operator's token (POST /auth/token, the dashboard's cookie)."""
    return mint(keyring, {"sub": username, "scope": OPERATOR_SCOPE}, ttl_seconds=ttl_seconds)


def mint_device(keyring: KeyRing, username: str, *, ttl_seconds: int) -> str:
    """A device token (app/auth/throttle.py): the client holding it logged in as `username`
    before. It authorises nothing; its `jti` names the device whose failures count on their own."""
    return mint(keyring, {"sub": username, "scope": DEVICE_SCOPE}, ttl_seconds=ttl_seconds)


def device_of(keyring: KeyRing, token: str, username: str) -> str | None:
    """The id of the device that `token` recognises for `username`; None for any other token."""
    try:
        claims = decode(keyring, token, scopes=(DEVICE_SCOPE,))
    except (InvalidToken, WrongScope):
        return None
    return claims["jti"] if claims["sub"] == username else None


def mint_launcher(keyring: KeyRing, operator: str, *, ttl_seconds: int) -> str:
    """A launcher token: admits and updates executions, nothing else."""
    return mint(keyring, {"sub": f"launcher:{operator}", "scope": LAUNCHER_SCOPE}, ttl_seconds=ttl_seconds)


def mint_metrics(keyring: KeyRing, operator: str, *, ttl_seconds: int) -> str:
    """A metrics token: reads /metrics, nothing else (a Prometheus scraper's credential)."""
    return mint(keyring, {"sub": f"metrics:{operator}", "scope": METRICS_SCOPE}, ttl_seconds=ttl_seconds)


def mint_worker(keyring: KeyRing, execution_id: uuid.UUID, seat: str, *, ttl_seconds: int) -> str:
    """The worker token admission hands one execution: it claims work as that execution."""
    return mint(keyring, {"sub": str(execution_id), "scope": WORKER_SCOPE, "seat": seat}, ttl_seconds=ttl_seconds)


# --- attempt tokens (contract section 3) -------------------------------------------------

_ATTEMPT_TYPES: dict[str, type | tuple[type, ...]] = {
    "dag_id": str, "run_id": str, "task_id": str, "map_index": int, "try_number": int,
    "execution_id": str, "orig_iat": int,
}


@dataclass(frozen=True)
class AttemptClaims:
    """A verified attempt token. `attempt_epoch` keeps the claim's presence: None when the
    token does not carry it (a legacy token), else its value — absent, 0 and N differ."""

    ti_id: uuid.UUID
    try_number: int
    attempt_epoch: int | None
    orig_iat: int
    claims: dict[str, Any]  # verbatim, for renewal

    @property
    def has_epoch(self) -> bool:
        return self.attempt_epoch is not None

    @property
    def key(self) -> AttemptKey:
        """The attempt a settling write names: epoch coalesce(attempt_epoch, 0)."""
        return AttemptKey(self.ti_id, self.try_number, self.attempt_epoch or 0)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def attempt_claims(claims: dict[str, Any]) -> AttemptClaims:
    """Check an attempt token's claims beyond the signature; InvalidToken if malformed."""
    for name, kind in _ATTEMPT_TYPES.items():
        value = claims.get(name)
        if not (_int(value) if kind is int else isinstance(value, kind)):
            raise InvalidToken(f"claim {name} missing or malformed")
    epoch = claims.get("attempt_epoch")
    if "attempt_epoch" in claims and not (_int(epoch) and epoch >= 0):
        raise InvalidToken("claim attempt_epoch malformed")
    try:
        ti_id = uuid.UUID(claims["sub"])
    except (ValueError, TypeError, AttributeError) as exc:
        raise InvalidToken("claim sub is not a task instance id") from exc
    return AttemptClaims(ti_id, claims["try_number"], epoch if "attempt_epoch" in claims else None,
                         claims["orig_iat"], dict(claims))


def mint_attempt(keyring: KeyRing, ti: AttemptIdentity, execution_id: uuid.UUID, *, ttl_seconds: int) -> str:
    """A fresh attempt token for the attempt `ti` was just claimed for by `execution_id`;
    orig_iat starts the credential's lifetime."""
    now = int(time.time())
    return mint(keyring, {
        "sub": str(ti.id), "scope": ATTEMPT_SCOPE, "dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
        "map_index": ti.map_index, "try_number": ti.try_number, "execution_id": str(execution_id),
        "attempt_epoch": ti.attempt_epoch, "orig_iat": now,
    }, ttl_seconds=ttl_seconds, now=now)


def renew_attempt(keyring: KeyRing, token: AttemptClaims, *, ttl_seconds: int, max_lifetime_seconds: int) -> str:
    """The same claims verbatim — attempt_epoch absent, 0 or N alike, orig_iat kept — with a
    new iat, exp and jti, and the current issuer and audience (`nbf` kept, or set for a token
    minted before it had one). Never past orig_iat + max_lifetime_seconds (InvalidToken beyond it)."""
    now = int(time.time())
    ceiling = token.orig_iat + max_lifetime_seconds
    if now >= ceiling:
        raise InvalidToken("the attempt credential's maximum lifetime has passed")
    kept = {k: v for k, v in token.claims.items() if k not in ("iat", "exp", "jti")}
    return _sign(keyring, {"nbf": now, **kept, "iat": now, "exp": min(now + ttl_seconds, ceiling),
                           "jti": uuid.uuid4().hex, "iss": ISSUER, "aud": audience(ATTEMPT_SCOPE)})


# --- log continuation cursors -------------------------------------------------------------

CURSOR_TTL_SECONDS = 7 * 24 * 3600


def sign_cursor(keyring: KeyRing, ti_id: uuid.UUID, try_number: int, position: int) -> str:
    """An opaque, signed position in one try's log (never trusted unsigned)."""
    return mint(keyring, {"sub": str(ti_id), "scope": CURSOR_SCOPE, "try_number": try_number, "pos": position},
                ttl_seconds=CURSOR_TTL_SECONDS)


def read_cursor(keyring: KeyRing, token: str, ti_id: uuid.UUID, try_number: int) -> int:
    """The position in `token`; InvalidToken if forged, expired or for another try's log."""
    try:
        claims = decode(keyring, token, scopes=(CURSOR_SCOPE,))
    except WrongScope as exc:
        raise InvalidToken(str(exc)) from exc
    position = claims.get("pos")
    elsewhere = claims.get("sub") != str(ti_id) or claims.get("try_number") != try_number
    if elsewhere or not (_int(position) and position >= 0):
        raise InvalidToken("the continuation token belongs to another log")
    return position
