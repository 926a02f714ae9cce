"""Installation bootstrap (the JWT key ring and the operator password) and login."""

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, select
from sqlmodel import Session

from app.auth import keys, tokens
from app.auth.models import InstallationSecret
from app.auth.tokens import KeyRing, new_secret
from app.config import Settings
from app.db.statements import insert_ignore
from app.errors import forbidden, unauthorized
from app.telemetry.metrics import agent_legacy_attempt_tokens

_hasher = PasswordHasher()
# An argon2 check costs tens of milliseconds and 64 MiB: bound how many run at once, and
# remember a password that verified for a while (HTTP Basic clients send it on every call).
_VERIFY_SLOTS = threading.BoundedSemaphore(2)
VERIFIED_FOR_SECONDS = 300.0
_verified: dict[bytes, float] = {}


def verify_password(password_hash: str, password: str) -> bool:
    """argon2 verification of `password` against the stored hash, remembered when it passes."""
    key = hashlib.sha256(password_hash.encode() + b"\0" + password.encode()).digest()
    now = time.monotonic()
    if _verified.get(key, 0.0) > now:
        return True
    with _VERIFY_SLOTS:
        try:
            ok = _hasher.verify(password_hash, password)
        except (VerificationError, InvalidHashError):
            ok = False
    if ok:
        if len(_verified) >= 1024:
            _verified.clear()
        _verified[key] = now + VERIFIED_FOR_SECONDS
    return ok


@dataclass(frozen=True)
class OperatorCredentials:
    """The operator's username and either the configured password or the stored hash."""

    username: str
    password: str | None = None
    password_hash: str | None = None

    def check(self, username: str, password: str) -> bool:
        user_ok = hmac.compare_digest(username.encode(), self.username.encode())
        if self.password is not None:
            return hmac.compare_digest(password.encode(), self.password.encode()) and user_ok
        return verify_password(self.password_hash or "", password) and user_ok


@dataclass(frozen=True)
class Installation:
    keyring: KeyRing
    operator: OperatorCredentials
    generated_password: str | None  # set only on the start that generated it


def _get_or_create(session: Session, name: str, make: callable) -> tuple[str, bool]:
    """The stored secret `name`, creating it once; safe when replicas start together."""
    value = make()
    created = insert_ignore(session, InstallationSecret, {"name": name, "value": value}, ["name"])
    stored = session.execute(select(InstallationSecret.value).where(InstallationSecret.name == name)).scalar_one()
    return stored, created


def bootstrap(engine: Engine, settings: Settings) -> Installation:
    """Load (or generate once) what this installation signs and logs in with."""
    generated: str | None = None
    with Session(engine) as session:
        if settings.jwt_secret is not None:
            active = settings.jwt_secret.get_secret_value()
        else:
            active, _ = _get_or_create(session, "jwt_secret", new_secret)
        if settings.admin_password is not None:
            operator = OperatorCredentials(settings.admin_username, password=settings.admin_password.get_secret_value())
        else:
            password = secrets.token_urlsafe(16)
            stored_hash, created = _get_or_create(session, "admin_password_hash", lambda: _hasher.hash(password))
            generated = password if created else None
            operator = OperatorCredentials(settings.admin_username, password_hash=stored_hash)
        signing_pem = settings.signing_key_pem
        if signing_pem is None and settings.jwt_algorithm in keys.ASYMMETRIC:
            signing_pem, _ = _get_or_create(session, f"jwt_signing_key_{settings.jwt_algorithm.lower()}",
                                            lambda: keys.generate(settings.jwt_algorithm))
        # Every generated key verifies here whatever this replica signs with: during a rollout
        # that switches the algorithm, replicas on the old setting accept the new tokens, and a
        # key generated for an earlier algorithm keeps its tokens valid until they expire.
        generated_keys = session.execute(select(InstallationSecret.value).where(
            InstallationSecret.name.in_([f"jwt_signing_key_{a.lower()}" for a in keys.ASYMMETRIC]))).scalars().all()
        session.commit()
    return Installation(keyring(settings, active, signing_pem, generated_keys), operator, generated)


def keyring(settings: Settings, secret: str, signing_pem: str | None, generated_keys: Sequence[str] = ()) -> KeyRing:
    """The HS256 keys (the active secret under jwt_kid, the accepted ones under theirs), the
    accepted public keys, the public halves of the installation's generated keys and, when there
    is one, the asymmetric signing key, which then signs (each asymmetric key under its
    thumbprint)."""
    ring: dict[str, keys.Key] = {kid: s.get_secret_value() for kid, s in settings.jwt_accepted_keys.items()}
    ring[settings.jwt_kid] = secret
    for public in [keys.load_public(pem) for pem in settings.jwt_accepted_public_keys] + \
            [keys.verifying(keys.load_private(pem)) for pem in generated_keys]:
        ring[keys.kid_of(public)] = public
    active = settings.jwt_kid
    if signing_pem is not None:
        private = keys.load_private(signing_pem)
        active = keys.kid_of(private)
        ring[active] = private
    return KeyRing(active, ring, settings.unscoped_token_grace_seconds)


def verified_attempt(keyring: tokens.KeyRing, credentials: str, *,
                     accept_legacy: bool) -> tuple[tokens.AttemptClaims, str]:
    """An attempt token's claims and the execution it names (contract 3): 401 for a token
    refused, 403 for another scope; a claim-less one is counted, and refused if `accept_legacy`
    is off. The one check of the attempt routes and of every entry of a batch."""
    try:
        claims = tokens.decode(keyring, credentials, scopes=(tokens.ATTEMPT_SCOPE,))
        attempt = tokens.attempt_claims(claims)
    except tokens.InvalidToken as exc:
        raise unauthorized(f"The token was refused: {exc}.") from exc
    except tokens.WrongScope as exc:
        raise forbidden(str(exc)) from exc
    if not attempt.has_epoch:
        agent_legacy_attempt_tokens.inc()
        if not accept_legacy:
            raise unauthorized("Attempt tokens without attempt_epoch are not accepted.")
    return attempt, claims["execution_id"]
