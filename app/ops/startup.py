"""What `fenceline serve` (and `migrate`) checks before it serves, and the exit status of each
refusal (docs/operations.md): one line naming the setting, no traceback.

- 2: a bad setting or a malformed database URL.
- 3: the port in use.
- 4: the database unreachable after retrying with back-off for
  FENCELINE_DB_CONNECT_TIMEOUT_SECONDS.
- 5: a schema this version does not serve (docs/upgrades.md).
- 6: an unwritable data or log directory.
- 7: --workers refused (more than one on SQLite, or past the connection budget).
- 8: `migrate --contract` refused while a replica of an older release is alive.
"""

import errno
import os
import re
import socket
import tempfile
from pathlib import Path

import tenacity
from pydantic import ValidationError
from pydantic_settings import SettingsError
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from app.config import Settings
from app.db.dialect import dialect_for_url
from app.ops.private import PASSWORD_FILE

BAD_SETTING, PORT_IN_USE, DATABASE_UNREACHABLE, SCHEMA_NOT_AT_HEAD, UNWRITABLE_DIRECTORY = 2, 3, 4, 5, 6
WORKERS_REFUSED = 7  # --workers on SQLite, or past the database's connection budget
CONTRACT_REFUSED = 8  # migrate --contract while a replica of an older head is alive
# SQLSTATEs no retry can fix: wrong password or role, no such database. libpq reports a refused
# connection with no SQLSTATE, only the server's message, so those are known by their words.
_NOT_RETRIED = {"28P01", "28000", "3D000"}
_NOT_RETRIED_WORDS = ("password authentication failed", "does not exist", "no pg_hba.conf entry")


SECRET_SETTINGS = frozenset(name for name, f in Settings.model_fields.items() if "Secret" in str(f.annotation))
# What a JSON setting looks like, for the line refusing one that is not JSON.
JSON_EXAMPLES = {"FENCELINE_TRUSTED_PROXIES": '\'["10.0.0.0/8"]\'',
                 "FENCELINE_JWT_ACCEPTED_KEYS": '\'{"k0": "the old secret"}\''}


class StartupError(Exception):
    """A refusal to start: `status` is the exit status, the message the one line to print."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _setting(field: str) -> str:
    return field if field.isupper() else f"FENCELINE_{field.upper()}"


def load_settings() -> Settings:
    """The settings, or StartupError(2) naming the first bad one."""
    from app.config import get_settings

    try:
        return get_settings()
    except SettingsError as exc:  # a variable of a list or mapping that is not JSON
        field = re.search(r'field "(\w+)"', str(exc))
        name = _setting(field.group(1)) if field else "a setting"
        raise StartupError(BAD_SETTING, f"{name} is not valid: not JSON (for example "
                                        f"{JSON_EXAMPLES.get(name, '[]')})") from exc
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in error["loc"][:1])
        name = _setting(field)
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        shown = "" if field in SECRET_SETTINGS else f"={str(error.get('input'))[:80]!r}"  # never a secret's words
        raise StartupError(BAD_SETTING, f"{name}{shown} is not valid: "
                                        f"{error['msg'].removeprefix('Value error, ')}{more}") from exc


def redacted(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def database_setting() -> str:
    """The variable the database URL was read from: FENCELINE_DATABASE_URL, else DATABASE_URL
    (app/config.py reads them in that order)."""
    if os.environ.get("FENCELINE_DATABASE_URL") is None and os.environ.get("DATABASE_URL") is not None:
        return "DATABASE_URL"
    return "FENCELINE_DATABASE_URL"


def database_engine(settings: Settings) -> Engine:
    """An engine for the configured URL (nothing connects yet), or StartupError(2) when the URL is
    malformed, names a database other than SQLite or PostgreSQL, or a driver not installed."""
    url = settings.resolved_database_url
    try:
        dialect_for_url(url)
        return create_engine(url)
    except (ArgumentError, ValueError, NoSuchModuleError, ImportError) as exc:
        raise StartupError(BAD_SETTING, f"{database_setting()} is not a database URL fenceline can use "
                                        f"({exc}); for example postgresql://user:password@host:5432/fenceline "
                                        "or sqlite:////var/lib/fenceline/fenceline.db") from exc


def _writable(directory: Path, setting: str) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # private (app/ops/private.py)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise StartupError(UNWRITABLE_DIRECTORY, f"{setting}: cannot write to {directory} "
                                                 f"({exc.strerror or exc})") from exc


def check_directories(settings: Settings) -> None:
    """The data directory (for the SQLite file) and the file log store's directory are
    writable, or StartupError(6)."""
    from app.logs import stores

    url = make_url(settings.resolved_database_url)
    if dialect_for_url(settings.resolved_database_url).file_based and url.database not in (None, "", ":memory:"):
        setting = "FENCELINE_DATA_DIR" if settings.database_url is None else database_setting()
        _writable(Path(url.database).parent, setting)
    if stores.choose(settings)[0] == "file":
        _writable(settings.resolved_log_dir, "FENCELINE_LOG_DIR" if settings.log_dir else "FENCELINE_DATA_DIR")


def _why(exc: DBAPIError) -> str:
    return (str(exc.orig).strip().splitlines() or [type(exc.orig).__name__])[0]


def _refused(exc: BaseException) -> bool:
    """A refusal no retry can fix: wrong password or role, no such database."""
    return isinstance(exc, DBAPIError) and (getattr(exc.orig, "sqlstate", None) in _NOT_RETRIED
                                            or any(w in _why(exc) for w in _NOT_RETRIED_WORDS))


def wait_for_database(engine: Engine, timeout_seconds: float, say=lambda _: None) -> None:
    """Until the database answers, retrying with back-off (0.25 s doubling to 5 s) for at most
    `timeout_seconds`; StartupError(4) then, or at once for a refusal no retry can fix."""
    where = redacted(engine.url.render_as_string(hide_password=False))

    def connect() -> None:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        finally:
            engine.dispose()

    backoff = tenacity.wait_exponential(multiplier=0.25, max=5.0)
    try:
        tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, DBAPIError) and not _refused(exc)),
            stop=tenacity.stop_after_delay(timeout_seconds),
            # The last sleep ends at the deadline, for one more try then.
            wait=lambda state: min(backoff(state), timeout_seconds - state.seconds_since_start),
            before_sleep=lambda state: say(f"the database at {where} does not answer "
                                           f"({_why(state.outcome.exception())}); retrying"),
            reraise=True)(connect)
    except DBAPIError as exc:
        if _refused(exc):
            raise StartupError(DATABASE_UNREACHABLE, f"{database_setting()}: the database at {where} "
                                                     f"refused the connection: {_why(exc)}") from exc
        raise StartupError(DATABASE_UNREACHABLE, (
            f"{database_setting()}: the database at {where} did not answer within {timeout_seconds:g}s "
            f"(FENCELINE_DB_CONNECT_TIMEOUT_SECONDS): {_why(exc)}")) from exc


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything says the server listens; StartupError(3)
    when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        what = "is in use by another process" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        raise StartupError(PORT_IN_USE, f"--port: {host}:{port} {what}") from exc
    sock.set_inheritable(True)
    os.set_inheritable(sock.fileno(), True)
    return sock


def hand_over_password(password: str, settings: Settings, say, *, terminal: bool) -> None:
    """Give the operator the password generated at this installation's first start, never to a
    log stream: on the terminal when plain text goes to one, else into a file of the data
    directory that only this user can read (a log aggregator is told its path, not its text)."""
    who = f"username {settings.admin_username!r}"
    if terminal and settings.log_format == "plain":
        say(f"generated operator credentials (shown once): {who} password {password!r}")
        return
    path = settings.data_dir / PASSWORD_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(password + "\n")
    except OSError as exc:
        say(f"generated an operator password but could not write it to {path} ({exc.strerror or exc}); set "
            "FENCELINE_ADMIN_PASSWORD and restart to log in")
        return
    say(f"generated operator credentials: {who}, the password in {path} (readable by this user only; "
        "delete it once read)")
