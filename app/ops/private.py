"""Files only their owner may read (contract 7). On the default install the SQLite database
(with its -wal, -shm and -journal files), the generated operator password and the file log
store hold every secret the server has, the signing key among them (it is kept in the
database): a local user who could read them could forge any token. They are created 0600 in
0700 directories, and `serve`, `migrate` and `logs copy` check them at start: any that group or
others may use is made private again, and one warning line names them.

A 0700 log directory keeps every stream under it from other users, whatever the mode of a file
written before these checks (they are not walked at each start). On PostgreSQL the database is
no file here; docs/operations.md says what to protect instead.
"""

import os
import stat
from pathlib import Path

from sqlalchemy import make_url

from app.config import Settings
from app.db.dialect import dialect_for_url

PRIVATE_FILE, PRIVATE_DIRECTORY = 0o600, 0o700
OTHERS = 0o077  # the group's and others' bits
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")
PASSWORD_FILE = "operator-password"  # in the data directory, where hand_over_password writes it (startup.py)


def sqlite_file(settings: Settings) -> Path | None:
    """The SQLite database file, None for an in-memory or a PostgreSQL database."""
    url = settings.resolved_database_url
    database = make_url(url).database
    if dialect_for_url(url).file_based and database not in (None, "", ":memory:"):
        return Path(database)
    return None


def create_database_file(settings: Settings) -> None:
    """The SQLite file, created empty and private before SQLite creates it with the umask's mode
    (its -wal and -shm files take the database file's mode)."""
    path = sqlite_file(settings)
    if path is not None:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))


def private_paths(settings: Settings) -> list[Path]:
    """What must be private: the data directory and its password file, the SQLite files, and the
    file log store's directory."""
    from app.logs import stores

    paths = [settings.data_dir, settings.data_dir / PASSWORD_FILE]
    if (database := sqlite_file(settings)) is not None:
        paths += [Path(f"{database}{suffix}") for suffix in SQLITE_COMPANIONS]
    if stores.choose(settings)[0] == "file":
        paths.append(settings.resolved_log_dir)
    return paths


def repair(settings: Settings) -> str | None:
    """Take the group's and others' rights from every path of private_paths that has some; the
    one warning line naming them, or None when every one was private already."""
    repaired, refused = [], []
    for path in dict.fromkeys(private_paths(settings)):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & OTHERS:
                path.chmod(mode & ~OTHERS)
                repaired.append(str(path))
        except FileNotFoundError:
            continue
        except OSError as exc:
            refused.append(f"{path} ({exc.strerror or exc})")
    if not repaired and not refused:
        return None
    said = [f"made private (files 0600, directories 0700) what other users could read: {', '.join(repaired)}"] \
        if repaired else []
    said += [f"could not make private: {', '.join(refused)}"] if refused else []
    return "warning: " + "; ".join(said)
