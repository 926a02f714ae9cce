"""Login throttling (contract 7): a password check that keeps failing is slowed down.

Each failed check is a row against two subjects, the username as tried from the client's
address and the client address alone, in the database, so every replica counts the same
failures. After USERNAME_LIMIT failures for one username from one address within WINDOW, or
ADDRESS_LIMIT from one address, the next check from there waits: 1 s after the failure that
reached the limit, doubling with each failure after it, at most 60 s. While it waits, every
check of that username from that address, or any check from that address, is refused (429,
`Retry-After`) without looking at the password. A success forgets the username's failures
from that address.

The username's count is kept per address so that no stranger can lock the owner out: an
attacker anywhere sending wrong passwords for `admin` is slowed down at its own addresses,
while the owner's right password from another address is let through (issue 30). Where the
server cannot tell the address, the username alone is the subject.
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
USERNAME_LIMIT, ADDRESS_LIMIT = 5, 20
FIRST_WAIT_SECONDS, LONGEST_WAIT_SECONDS = 1, 60


def _subject(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}\0{value}".encode(errors="surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who is checking a password: the username given, and the client's address (None when
    the server cannot tell)."""

    username: str
    address: str | None

    @property
    def username_subject(self) -> str:
        """The username as tried from this address (the username alone when the address is unknown)."""
        if self.address is None:
            return _subject("username", self.username)
        return _subject("username-at", f"{self.username}\0{self.address}")

    @property
    def limits(self) -> dict[str, int]:
        """Each subject the caller's failures count against, with its limit."""
        limits = {self.username_subject: USERNAME_LIMIT}
        if self.address is not None:
            limits[_subject("address", self.address)] = ADDRESS_LIMIT
        return limits


@dataclass(frozen=True)
class Standing:
    wait_seconds: int  # 0: the caller may check a password now
    username_failures: int


def standing(*, session: Session, caller: Caller, now: datetime) -> Standing:
    """How long `caller` must wait before a password check, and its username's recent failures."""
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
    return Standing(wait, counts.get(caller.username_subject, 0))


def failed(*, session: Session, caller: Caller, now: datetime) -> None:
    """Count a failed check against each of the caller's subjects; failures older than the
    window, anyone's, are forgotten on the way."""
    session.execute(delete(LoginFailure).where(LoginFailure.failed_at <= now - WINDOW))
    session.execute(insert(LoginFailure), [{"id": uuid.uuid4(), "subject": s, "failed_at": now}
                                           for s in caller.limits])


def succeeded(*, session: Session, caller: Caller) -> None:
    """Forget the username's failures from the caller's address (the address's stay counted)."""
    session.execute(delete(LoginFailure).where(LoginFailure.subject == caller.username_subject))


def throttled(wait_seconds: int) -> AppError:
    error = AppError(429, "too-many-login-attempts", "Too many login attempts",
                     f"Too many failed logins; retry in {wait_seconds} s.")
    error.headers = {"Retry-After": str(wait_seconds)}
    return error
