"""The log stores: the contract and its faults (base.py), a module per store (file.py,
database.py, s3.py over chunked.py), and here the chooser: which store serves,
FENCELINE_LOG_STORE or the default for the installation.

Unset, it is `file` on SQLite. On PostgreSQL it is `database` for a new installation, so that
replicas on different machines need nothing else; an installation whose log directory already
holds logs keeps `file` until `fenceline logs copy` has copied them (it leaves a marker naming
the store it copied to, which becomes the default).
"""

from sqlalchemy import Engine

from app.config import Settings
from app.db.dialect import dialect_for_url
from app.logs.stores.base import LogStore
from app.logs.stores.database import DatabaseLogStore
from app.logs.stores.file import FileLogStore


def choose(settings: Settings) -> tuple[str, str | None]:
    """The store's name, and what to tell the operator at start when the log directory decided it."""
    if settings.log_store:
        return settings.log_store, None
    if dialect_for_url(settings.resolved_database_url).writers_take_turns:  # one process: its files serve every request
        return "file", None
    files = FileLogStore(settings.resolved_log_dir)
    if moved := files.moved_to():
        return moved, (f"the logs in {files.root} were copied to the {moved} store by `fenceline logs copy`; "
                       "attempt logs are stored there now")
    if files.holds_logs():
        return "file", (f"the log directory {files.root} holds attempt logs, so they stay in the file store until "
                        "`fenceline logs copy --to database` has copied them (then restart: the database store "
                        "serves every replica)")
    return "database", None


def open_store(name: str, settings: Settings, engine: Engine) -> LogStore:
    """The store FENCELINE_LOG_STORE calls `name` (validated in app/config.py)."""
    if name == "file":
        return FileLogStore(settings.resolved_log_dir)
    if name == "database":
        return DatabaseLogStore(engine)
    from app.logs.stores.s3 import S3LogStore  # boto3 is imported only by installations that use it

    return S3LogStore(name, engine, timeout_seconds=settings.log_store_timeout_seconds)
