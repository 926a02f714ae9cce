"""Login throttling (contract 7): a password check that keeps failing is slowed down, and no
stranger can keep the owner out (OWASP's "device cookies").

A client that has logged in successfully before holds a device token (app/auth/tokens.py: a
signed token naming the username, returned by every successful login as the `fenceline_device`
cookie and, to API clients, as `device_token`, sent back as that cookie or the
`Fenceline-Device` header). Its failures count against that token alone, so others' failures
never slow it down. Every other client is untrusted: its failures count against the username,
whatever the address they come from, and against the client's address. Rotating addresses
therefore buys an attacker nothing, and a stranger on the owner's own address (NAT, a proxy not
listed in FENCELINE_TRUSTED_PROXIES) slows down the untrusted clients only.

Each failure is a row per subject in the database (as a SHA-256), so every replica counts the
same failures. After USERNAME_LIMIT untrusted failures for one username within WINDOW, DEVICE_LIMIT
with one device token, or ADDRESS_LIMIT from one address, the next check waits: 1 s after the
failure that reached the limit, doubling with each failure after it, at most 60 s. While it
waits, every such check is refused (429, `Retry-After`) without looking at the password. A
success forgets the failures counted against the caller's device token, or an untrusted
caller's against the username (the address's stay counted).
"""

import hashlib
import math
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, insert, select
from sqlmodel import Session

from app.auth.models import LoginFailure
from app.errors import AppError

WINDOW = timedelta(minutes=5)
USERNAME_LIMIT, DEVICE_LIMIT, ADDRESS_LIMIT = 5, 5, 20
FIRST_WAIT_SECONDS, LONGEST_WAIT_SECONDS = 1, 60


def _subject(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}\0{value}".encode(errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who is checking a password: the username given, the client's address (None when the
    server cannot tell) and the id of the device token it holds for that username, if any."""

    username: str
    address: str | None
    device: str | None = None

    @property
    def own_subject(self) -> str:
        """What a success forgets: the device token's failures, or the username's untrusted ones."""
        if self.device is not None:
            return _subject("device", self.device)
        return _subject("username", self.username)

    @property
    def limits(self) -> dict[str, int]:
        """Each subject the caller's failures count against, with its limit."""
        if self.device is not None:
            return {self.own_subject: DEVICE_LIMIT}
        limits = {self.own_subject: USERNAME_LIMIT}
        if self.address is not None:
            limits[_subject("address", self.address)] = ADDRESS_LIMIT
        return limits


@dataclass(frozen=True)
class Standing:
    wait_seconds: int  # 0: the caller may check a password now
    own_failures: int  # recent failures a success forgets


def standing(*, session: Session, caller: Caller, now: datetime) -> Standing:
    """How long `caller` must wait before a password check, and its own recent failures."""
    limits = caller.limits
    rows = session.execute(
        select(LoginFailure.subject, func.count(), func.max(LoginFailure.failed_at))
        .where(LoginFailure.subject.in_(limits), LoginFailure.failed_at > now - WINDOW)
        .group_by(LoginFailure.subject)
    ).all()
    wait, counts = 0, {}
    for subject, count, last in rows:
        counts[subject] = count
        if count >= limits[subject]:
            pause = min(LONGEST_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2 ** (count - limits[subject]))
            wait = max(wait, math.ceil((last + timedelta(seconds=pause) - now).total_seconds()))
    return Standing(wait, counts.get(caller.own_subject, 0))


def failed(*, session: Session, caller: Caller, now: datetime) -> None:
    """Count a failed check against each of the caller's subjects; failures older than the
    window, anyone's, are forgotten on the way."""
    session.execute(delete(LoginFailure).where(LoginFailure.failed_at <= now - WINDOW))
    session.execute(insert(LoginFailure), [{"id": uuid.uuid4(), "subject": s, "failed_at": now}
                                           for s in caller.limits])


def succeeded(*, session: Session, caller: Caller) -> None:
    """Forget the caller's own failures (an address's stay counted)."""
    session.execute(delete(LoginFailure).where(LoginFailure.subject == caller.own_subject))


def throttled(wait_seconds: int) -> AppError:
    error = AppError(429, "too-many-login-attempts", "Too many login attempts",
                     f"Too many failed logins; retry in {wait_seconds} s.")
    error.headers = {"Retry-After": str(wait_seconds)}
    return error
